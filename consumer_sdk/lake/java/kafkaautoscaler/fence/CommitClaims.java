package kafkaautoscaler.fence;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collections;
import java.util.Iterator;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * The claims a commit's rows were read under, as kafka-autoscaler's sink writes them into a
 * commit's metadata text (Delta's userMetadata, Iceberg's snapshot summary): the claim token
 * per Kafka partition and the directory of those partitions' owner files
 * (consumer_sdk/lake/commit_offsets.py encodes it, consumer_sdk/lake/partition_fence.py owns the files).
 */
public final class CommitClaims {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String MARKER = "kafka-autoscaler";
    /** A commit that names no claims (not ours, or ours without a fence). */
    public static final CommitClaims NONE = new CommitClaims(null, new TreeMap<>());

    private final Path fence;
    private final SortedMap<Integer, String> tokens;

    private CommitClaims(Path fence, SortedMap<Integer, String> tokens) {
        this.fence = fence;
        this.tokens = Collections.unmodifiableSortedMap(tokens);
    }

    /** The claims in a commit's metadata text; {@link #NONE} for another writer's text. */
    public static CommitClaims ofMetadata(String text) {
        if (text == null) {
            return NONE;
        }
        try {
            JsonNode body = JSON.readTree(text).path(MARKER);
            JsonNode fence = body.path("fence");
            JsonNode claims = body.path("claims");
            if (!fence.isTextual() || !claims.isObject()) {
                return NONE;
            }
            TreeMap<Integer, String> tokens = new TreeMap<>();
            for (Iterator<Map.Entry<String, JsonNode>> it = claims.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> claim = it.next();
                tokens.put(Integer.valueOf(claim.getKey()), claim.getValue().asText());
            }
            return new CommitClaims(Paths.get(fence.asText()), tokens);
        } catch (JsonProcessingException | NumberFormatException e) {
            return NONE;  // metadata of another writer, not ours
        }
    }

    /** Both commits' claims (a commit of several snapshots); the fences must agree. */
    public CommitClaims and(CommitClaims other) {
        if (other.tokens.isEmpty()) {
            return this;
        }
        if (tokens.isEmpty()) {
            return other;
        }
        if (!fence.equals(other.fence)) {
            throw new IllegalArgumentException(
                    "kafka-autoscaler: one commit names two fence directories: " + fence
                            + " and " + other.fence);
        }
        TreeMap<Integer, String> both = new TreeMap<>(tokens);
        both.putAll(other.tokens);
        return new CommitClaims(fence, both);
    }

    Path fence() {
        return fence;
    }

    SortedMap<Integer, String> tokens() {
        return tokens;
    }
}
