package kafkaautoscaler.broker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import org.apache.kafka.common.Uuid;

/**
 * The loads the sidecar published for one share group: each partition's load in consumers
 * (its write speed over one consumer's capacity, plus its backlog drained in the drain time),
 * by topic id and partition index. The record format is contract/share_loads.py's; a record
 * that breaks it is refused with a reason, never thrown.
 */
record ShareLoads(String group, long writtenMs, Map<Uuid, double[]> loads) {
  static final int FORMAT = 1;
  static final int MAX_VALUE_BYTES = 4 * 1024 * 1024;
  static final int MAX_PARTITIONS = 1 << 16;
  static final double MAX_LOAD = 1_000_000.0;

  private static final ObjectMapper JSON = new ObjectMapper();

  /** The loads in {@code value} (the record key is the group), checked against the clock. */
  static ShareLoads parse(byte[] key, byte[] value, long nowMs, long maxAgeMs)
      throws Plan.Refused {
    if (key == null || value == null) {
      throw new Plan.Refused("no key or no value (a record's key is its group, its value JSON)");
    }
    if (value.length > MAX_VALUE_BYTES) {
      throw new Plan.Refused("value over " + MAX_VALUE_BYTES + " bytes");
    }
    String group = new String(key, StandardCharsets.UTF_8);
    JsonNode root;
    try {
      root = JSON.readTree(value);
    } catch (IOException e) {
      throw new Plan.Refused("value is not JSON");
    }
    if (root == null || !root.isObject()) {
      throw new Plan.Refused("value is not a JSON object");
    }
    if (!root.path("format").isInt() || root.path("format").intValue() != FORMAT) {
      throw new Plan.Refused("format is not " + FORMAT);
    }
    if (!group.equals(root.path("group").asText(null))) {
      throw new Plan.Refused("group in the value differs from the key");
    }
    JsonNode written = root.path("written_ms");
    if (!written.isIntegralNumber() || !written.canConvertToLong()) {
      throw new Plan.Refused("written_ms is not an integer");
    }
    long writtenMs = written.longValue();
    if (writtenMs > nowMs + Plan.MAX_CLOCK_SKEW_MS) {
      throw new Plan.Refused(
          "written_ms is more than " + Plan.MAX_CLOCK_SKEW_MS + " ms in the future");
    }
    if (writtenMs < nowMs - maxAgeMs) {
      throw new Plan.Refused("older than autoscaler.plans.max.age.ms (" + maxAgeMs + ")");
    }
    JsonNode topics = root.path("loads");
    if (!topics.isObject() || topics.size() == 0) {
      throw new Plan.Refused("loads is not a non-empty object of topic id to loads");
    }
    Map<Uuid, double[]> loads = new HashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = topics.properties().iterator(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> topic = it.next();
      Uuid id;
      try {
        id = Uuid.fromString(topic.getKey());
      } catch (IllegalArgumentException e) {
        throw new Plan.Refused("a topic id is not a Kafka topic id (22 characters of base64)");
      }
      loads.put(id, partitionLoads(topic.getValue()));
    }
    return new ShareLoads(group, writtenMs, Collections.unmodifiableMap(loads));
  }

  private static double[] partitionLoads(JsonNode node) throws Plan.Refused {
    if (!node.isArray() || node.size() == 0 || node.size() > MAX_PARTITIONS) {
      throw new Plan.Refused(
          "a topic's loads are not a list of 1 to " + MAX_PARTITIONS + " numbers");
    }
    double[] loads = new double[node.size()];
    for (int partition = 0; partition < loads.length; partition++) {
      JsonNode load = node.get(partition);
      double value = load.isNumber() ? load.doubleValue() : Double.NaN;
      if (!(value >= 0.0 && value <= MAX_LOAD)) { // NaN fails both
        throw new Plan.Refused("a load is not a number in [0, " + (long) MAX_LOAD + "]");
      }
      loads[partition] = value;
    }
    return loads;
  }

  /** Whether these loads name every one of {@code topics}. */
  boolean covers(Iterable<Uuid> topics) {
    for (Uuid topic : topics) {
      if (!loads.containsKey(topic)) {
        return false;
      }
    }
    return true;
  }
}
