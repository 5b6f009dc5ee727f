package kafkaautoscaler.connect;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Paths;

import kafkaautoscaler.delta.FileAppend;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connect.planner.SparkConnectPlanner;
import org.apache.spark.sql.connect.plugin.CommandPlugin;
import org.sparkproject.connect.protobuf.Any;
import org.sparkproject.connect.protobuf.InvalidProtocolBufferException;

/**
 * The file appends of the sink ({@link FileAppend}, {@link kafkaautoscaler.iceberg.FileAppend})
 * as requests in JSON: called through py4j by a local session ({@link #run}), and as a Spark
 * Connect command plugin by a Connect server started with
 * {@code spark.connect.extensions.command.classes=kafkaautoscaler.connect.FileAppendCommand}:
 * the client sends the request as a command extension of type {@link #TYPE_URL}. A Connect
 * command returns no value, so a request naming a {@code reply} key gets its answer in that
 * key of the session's configuration, which the client reads and unsets.
 *
 * <p>Through Connect the client wrote the files: a commit naming a file the server cannot see
 * (it does not share the client's file system) is refused, never committed.
 */
public final class FileAppendCommand implements CommandPlugin {
    public static final String TYPE_URL = "type.googleapis.com/kafkaautoscaler.FileAppend";
    private static final ObjectMapper JSON = new ObjectMapper();

    /** Thrown when the files cannot be appended; nothing was committed. */
    public static final class Refused extends IllegalStateException {
        private static final long serialVersionUID = 1L;

        Refused(String message) {
            super(message);
        }
    }

    @Override
    public boolean process(byte[] command, SparkConnectPlanner planner) {
        Any extension;
        try {
            extension = Any.parseFrom(command);
        } catch (InvalidProtocolBufferException exc) {
            return false;
        }
        if (!TYPE_URL.equals(extension.getTypeUrl())) {
            return false;
        }
        SparkSession spark = planner.session();
        JsonNode request = parse(extension.getValue().toStringUtf8());
        checkFilesVisible(request);
        String reply = answer(spark, request);
        if (request.hasNonNull("reply")) {
            spark.conf().set(request.get("reply").asText(), reply);
        }
        return true;
    }

    /** Runs one request (JSON); returns its answer as JSON. */
    public static String run(SparkSession spark, String requestJson) {
        return answer(spark, parse(requestJson));
    }

    private static JsonNode parse(String requestJson) {
        try {
            return JSON.readTree(requestJson);
        } catch (IOException exc) {
            throw new UncheckedIOException(exc);
        }
    }

    private static String answer(SparkSession spark, JsonNode request) {
        try {
            return JSON.writeValueAsString(dispatch(spark, request));
        } catch (IOException exc) {
            throw new UncheckedIOException(exc);
        } catch (RuntimeException exc) {
            throw exc;
        } catch (Exception exc) {
            throw new IllegalStateException(exc);
        }
    }

    private static Object dispatch(SparkSession spark, JsonNode request) throws Exception {
        String op = request.get("op").asText();
        switch (op) {
            case "delta.refusal":
                return FileAppend.refusal(spark, request.get("root").asText());
            case "delta.commit":
                return FileAppend.commit(
                        spark,
                        request.get("root").asText(),
                        request.get("column").asText(),
                        request.get("value").asText(),
                        strings(request.get("paths")),
                        longs(request.get("sizes")),
                        strings(request.get("stats")),
                        request.get("metadata").asText());
            case "iceberg.layout":
                return kafkaautoscaler.iceberg.FileAppend.layout(
                        spark, request.get("identifier").asText(), request.get("column").asText());
            case "iceberg.commit":
                return kafkaautoscaler.iceberg.FileAppend.commit(
                        spark,
                        request.get("identifier").asText(),
                        request.get("column").asText(),
                        request.get("partition").asText(),
                        strings(request.get("paths")),
                        longs(request.get("sizes")),
                        request.get("metadata").asText());
            case "iceberg.expire":
                return kafkaautoscaler.iceberg.Expiry.expire(
                        spark, request.get("identifier").asText(), longs(request.get("ids")));
            default:
                throw new IllegalArgumentException("unknown file append request " + op);
        }
    }

    private static void checkFilesVisible(JsonNode request) {
        if (!request.has("paths")) {
            return;
        }
        String root = request.has("root") ? request.get("root").asText() : null;
        for (JsonNode path : request.get("paths")) {
            String name = path.asText();
            java.nio.file.Path file = root != null
                    ? Paths.get(root, name)
                    : name.startsWith("file:") ? Paths.get(URI.create(name)) : Paths.get(name);
            if (!Files.isRegularFile(file)) {
                throw new Refused("the Spark Connect server does not see the data file " + file
                        + " the client wrote (they share no file system)");
            }
        }
    }

    private static String[] strings(JsonNode values) {
        String[] found = new String[values.size()];
        for (int i = 0; i < found.length; i++) {
            found[i] = values.get(i).isNull() ? null : values.get(i).asText();
        }
        return found;
    }

    private static long[] longs(JsonNode values) {
        long[] found = new long[values.size()];
        for (int i = 0; i < found.length; i++) {
            found[i] = values.get(i).asLong();
        }
        return found;
    }
}
