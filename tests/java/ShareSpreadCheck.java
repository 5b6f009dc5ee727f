package kafkaautoscaler.broker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.common.Uuid;

/**
 * Runs {@link ShareSpread#spread} on one JSON case per line of stdin and prints each result as
 * one JSON line ({member: {topic id: [partitions]}}). A case: {"members": [...],
 * "subscriptions": {member: [topic ids]}, "partitions": [[topic id, index], ...], "loads":
 * [[topic id, index, load], ...], "current": {member: {topic id: [partitions]}}}.
 */
public final class ShareSpreadCheck {
  public static void main(String[] args) throws Exception {
    ObjectMapper json = new ObjectMapper();
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      JsonNode spec = json.readTree(line);
      List<String> members = new ArrayList<>();
      spec.get("members").forEach(m -> members.add(m.asText()));
      Map<String, Set<Uuid>> subscriptions = new HashMap<>();
      spec.get("subscriptions")
          .properties()
          .forEach(
              e -> {
                Set<Uuid> ids = new HashSet<>();
                e.getValue().forEach(t -> ids.add(Uuid.fromString(t.asText())));
                subscriptions.put(e.getKey(), ids);
              });
      List<ShareSpread.Slot> partitions = new ArrayList<>();
      spec.get("partitions")
          .forEach(
              p ->
                  partitions.add(
                      new ShareSpread.Slot(Uuid.fromString(p.get(0).asText()), p.get(1).asInt())));
      Map<ShareSpread.Slot, Double> loads = new HashMap<>();
      spec.get("loads")
          .forEach(
              l ->
                  loads.put(
                      new ShareSpread.Slot(Uuid.fromString(l.get(0).asText()), l.get(1).asInt()),
                      l.get(2).asDouble()));
      Map<String, Map<Uuid, Set<Integer>>> current = new HashMap<>();
      spec.get("current")
          .properties()
          .forEach(
              e -> {
                Map<Uuid, Set<Integer>> owned = new HashMap<>();
                e.getValue()
                    .properties()
                    .forEach(
                        t -> {
                          Set<Integer> ps = new HashSet<>();
                          t.getValue().forEach(p -> ps.add(p.asInt()));
                          owned.put(Uuid.fromString(t.getKey()), ps);
                        });
                current.put(e.getKey(), owned);
              });
      Map<String, Map<String, List<Integer>>> printed = new HashMap<>();
      ShareSpread.spread(members, subscriptions, partitions, loads, current)
          .forEach(
              (member, owned) -> {
                Map<String, List<Integer>> topics = new HashMap<>();
                owned.forEach((topic, ps) -> topics.put(topic.toString(), new ArrayList<>(ps)));
                printed.put(member, topics);
              });
      System.out.println(json.writeValueAsString(printed));
    }
  }
}
