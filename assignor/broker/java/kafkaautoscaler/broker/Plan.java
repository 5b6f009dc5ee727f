package kafkaautoscaler.broker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeSet;
import java.util.Set;
import org.apache.kafka.common.Uuid;

/**
 * A plan the sidecar published for one group: each member (by group.instance.id, or by member
 * id) and the partitions it should own, by topic id. The record format is
 * contract/broker_plans.py's; a record that breaks it is refused with a reason, never thrown.
 */
record Plan(String group, long writtenMs, Map<String, Map<Uuid, Set<Integer>>> members) {
  static final int FORMAT = 1;
  static final int MAX_VALUE_BYTES = 4 * 1024 * 1024;
  static final int MAX_MEMBERS = 10_000;
  static final int MAX_KEY_CHARS = 255;
  static final int MAX_PARTITION = 1 << 20;
  // Clocks of the sidecar and the broker differ; a plan written further ahead is refused.
  static final long MAX_CLOCK_SKEW_MS = 60_000;

  private static final ObjectMapper JSON = new ObjectMapper();

  /** Why a record could not be read as a plan. */
  static final class Refused extends Exception {
    private static final long serialVersionUID = 1L;
    final String reason;

    Refused(String reason) {
      super(reason, null, false, false);
      this.reason = reason;
    }
  }

  /** The plan in {@code value} (the record key is the group), checked against the clock. */
  static Plan parse(byte[] key, byte[] value, long nowMs, long maxAgeMs) throws Refused {
    if (key == null || value == null) {
      throw new Refused("no key or no value (a plan's key is its group, its value JSON)");
    }
    if (value.length > MAX_VALUE_BYTES) {
      throw new Refused("value over " + MAX_VALUE_BYTES + " bytes");
    }
    String group = new String(key, StandardCharsets.UTF_8);
    JsonNode root;
    try {
      root = JSON.readTree(value);
    } catch (IOException e) {
      throw new Refused("value is not JSON");
    }
    if (root == null || !root.isObject()) {
      throw new Refused("value is not a JSON object");
    }
    if (!root.path("format").isInt() || root.path("format").intValue() != FORMAT) {
      throw new Refused("format is not " + FORMAT);
    }
    if (!group.equals(root.path("group").asText(null))) {
      throw new Refused("group in the value differs from the key");
    }
    JsonNode written = root.path("written_ms");
    if (!written.canConvertToExactIntegral() || !written.isIntegralNumber()) {
      throw new Refused("written_ms is not an integer");
    }
    long writtenMs = written.longValue();
    if (writtenMs > nowMs + MAX_CLOCK_SKEW_MS) {
      throw new Refused("written_ms is more than " + MAX_CLOCK_SKEW_MS + " ms in the future");
    }
    if (writtenMs < nowMs - maxAgeMs) {
      throw new Refused("older than autoscaler.plans.max.age.ms (" + maxAgeMs + ")");
    }
    JsonNode members = root.path("members");
    if (!members.isObject() || members.size() == 0 || members.size() > MAX_MEMBERS) {
      throw new Refused("members is not an object of 1 to " + MAX_MEMBERS + " members");
    }
    Map<String, Map<Uuid, Set<Integer>>> parsed = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = members.properties().iterator(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> member = it.next();
      String name = member.getKey();
      if (name.isEmpty() || name.length() > MAX_KEY_CHARS) {
        throw new Refused("a member key is empty or over " + MAX_KEY_CHARS + " characters");
      }
      parsed.put(name, topics(member.getValue()));
    }
    return new Plan(group, writtenMs, Collections.unmodifiableMap(parsed));
  }

  private static Map<Uuid, Set<Integer>> topics(JsonNode node) throws Refused {
    if (!node.isObject()) {
      throw new Refused("a member's partitions are not an object of topic id to partitions");
    }
    Map<Uuid, Set<Integer>> topics = new HashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = node.properties().iterator(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> topic = it.next();
      Uuid id;
      try {
        id = Uuid.fromString(topic.getKey());
      } catch (IllegalArgumentException e) {
        throw new Refused("a topic id is not a Kafka topic id (22 characters of base64)");
      }
      if (!topic.getValue().isArray()) {
        throw new Refused("a topic's partitions are not a list");
      }
      Set<Integer> partitions = new TreeSet<>();
      for (JsonNode partition : topic.getValue()) {
        if (!partition.isInt() || partition.intValue() < 0 || partition.intValue() >= MAX_PARTITION) {
          throw new Refused("a partition is not an integer in [0, " + MAX_PARTITION + ")");
        }
        partitions.add(partition.intValue());
      }
      topics.put(id, Collections.unmodifiableSet(partitions));
    }
    return Collections.unmodifiableMap(topics);
  }
}
