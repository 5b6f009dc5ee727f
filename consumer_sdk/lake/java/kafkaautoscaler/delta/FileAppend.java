package kafkaautoscaler.delta;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.actions.Metadata;
import org.apache.spark.sql.types.StructField;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Commits Parquet files already written into a Delta table's directory, as one blind append
 * through Delta's own transaction: the table's log store links the commit (ours checks the
 * claims its metadata names), a concurrent append makes the transaction retry at the next
 * version, and checkpoints and post-commit hooks run as they do for a Spark write.
 *
 * <p>Only for tables whose files are read by column name with nothing checked per row: a
 * table with column mapping, constraints, invariants, generated or identity columns, or
 * UniForm is refused (its writes go through Spark, which applies them).
 */
public final class FileAppend {
    private static final String[] ROW_CHECKED_KEYS = {
        "delta.generationExpression", "delta.invariants", "delta.identity.start",
        "delta.columnMapping.id",
    };

    private FileAppend() {}

    /** Thrown by {@link #commit} when the table may no longer take such files. */
    public static final class Refused extends IllegalStateException {
        private static final long serialVersionUID = 1L;

        Refused(String message) {
            super(message);
        }
    }

    /**
     * Why the table at {@code tableRoot} cannot take files written outside Spark, or null if it
     * can.
     */
    public static String refusal(SparkSession spark, String tableRoot) {
        DeltaLog log = DeltaLog.forTable(spark, new Path(tableRoot));
        return refusal(log.update(false, Option.empty(), Option.empty()).metadata());
    }

    private static String refusal(Metadata metadata) {
        Map<String, String> configuration = CollectionConverters.asJava(metadata.configuration());
        for (String key : configuration.keySet()) {
            if (key.startsWith("delta.constraints.")) {
                return "it has the CHECK constraint " + key.substring("delta.constraints.".length());
            }
        }
        String mapping = configuration.getOrDefault("delta.columnMapping.mode", "none");
        if (!mapping.equals("none")) {
            return "its column mapping mode is " + mapping;
        }
        if (configuration.containsKey("delta.universalFormat.enabledFormats")) {
            return "it has UniForm enabled";
        }
        for (StructField field : metadata.schema().fields()) {
            for (String key : ROW_CHECKED_KEYS) {
                if (field.metadata().contains(key)) {
                    return "its column " + field.name() + " has " + key;
                }
            }
        }
        return null;
    }

    /**
     * Appends the files (paths relative to the table root, each under the partition directory
     * of {@code partitionValue}) in one commit carrying {@code userMetadata}; returns the
     * version committed. {@code stats}: each file's Delta statistics JSON (or null).
     */
    public static long commit(
            SparkSession spark,
            String tableRoot,
            String partitionColumn,
            String partitionValue,
            String[] paths,
            long[] sizes,
            String[] stats,
            String userMetadata) {
        DeltaLog log = DeltaLog.forTable(spark, new Path(tableRoot));
        OptimisticTransaction transaction = log.startTransaction();
        String refused = refusal(transaction.metadata());
        if (refused != null) {
            throw new Refused(
                    "cannot append files written outside Spark to " + tableRoot + ": " + refused);
        }
        scala.collection.immutable.Map<String, String> partition =
                scala.collection.immutable.Map$.MODULE$.from(
                        CollectionConverters.asScala(
                                Collections.singletonMap(partitionColumn, partitionValue)));
        long now = System.currentTimeMillis();
        List<Action> actions = new ArrayList<>(paths.length);
        for (int i = 0; i < paths.length; i++) {
            actions.add(new AddFile(
                    paths[i], partition, sizes[i], now, true, stats[i], null, null,
                    Option.empty(), Option.empty(), Option.empty(), Option.empty(),
                    Option.empty()));
        }
        scala.collection.immutable.Seq<String> partitionBy =
                CollectionConverters.asScala(Collections.singletonList(partitionColumn)).toList();
        DeltaOperations.Write operation = new DeltaOperations.Write(
                SaveMode.Append, Option.apply(partitionBy), Option.empty(),
                Option.apply(userMetadata), Option.empty(), Option.empty(), Option.empty(),
                Option.empty(), Option.empty());
        return transaction.commit(CollectionConverters.asScala(actions).toList(), operation);
    }
}
