package kafkaautoscaler.broker;

import java.util.HashSet;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.slf4j.Logger;

/**
 * The newest plan of each group, and the plans that match a group's members. Each group's plans
 * come from a topic of its own, {@code <topic>.<group>}, so that an ACL on that topic alone
 * decides who may steer the group: a plan naming another group is refused.
 */
final class PlanBook extends RecordBook<Plan> {
  PlanBook(Logger log, long maxAgeMs, String topic) {
    super(log, maxAgeMs, topic, "autoscaler assignor", "plan");
  }

  @Override
  boolean reads(String name) {
    return name.startsWith(topic + ".") && name.length() > topic.length() + 1;
  }

  @Override
  String topicsRead() {
    return topic + ".<group>";
  }

  @Override
  String topicOf(String group) {
    return topic + "." + group;
  }

  @Override
  Plan parse(byte[] key, byte[] value, long nowMs) throws Plan.Refused {
    return Plan.parse(key, value, nowMs, maxAgeMs);
  }

  @Override
  String group(Plan plan) {
    return plan.group();
  }

  @Override
  long writtenMs(Plan plan) {
    return plan.writtenMs();
  }

  @Override
  String size(Plan plan) {
    return plan.members().size() + " members";
  }

  /**
   * The newest fresh plan for the group's members: each member is named once, by its instance
   * id or else its member id, and any member the plan names beyond them is given nothing (a
   * member the sidecar emptied before stopping it, gone or still leaving).
   */
  Optional<Plan> matching(Map<String, Optional<String>> instanceIdByMember, long nowMs) {
    Plan best = null;
    for (Plan plan : records()) {
      if (fresh(plan, nowMs)
          && keysFor(plan, instanceIdByMember).isPresent()
          && (best == null || plan.writtenMs() > best.writtenMs())) {
        best = plan;
      }
    }
    return Optional.ofNullable(best);
  }

  /** Whether a fresh plan names any of these members (the group is the sidecar's). */
  boolean anyPlanNames(Map<String, Optional<String>> instanceIdByMember, long nowMs) {
    for (Plan plan : records()) {
      if (fresh(plan, nowMs)) {
        for (Map.Entry<String, Optional<String>> member : instanceIdByMember.entrySet()) {
          if (plan.members().containsKey(member.getKey())
              || member.getValue().filter(plan.members()::containsKey).isPresent()) {
            return true;
          }
        }
      }
    }
    return false;
  }


  /** Each member's key in {@code plan}, if the plan is for exactly these members. */
  static Optional<Map<String, String>> keysFor(
      Plan plan, Map<String, Optional<String>> instanceIdByMember) {
    Map<String, String> keys = new java.util.HashMap<>();
    Set<String> used = new HashSet<>();
    for (Map.Entry<String, Optional<String>> member : instanceIdByMember.entrySet()) {
      String instance = member.getValue().orElse(null);
      String key =
          instance != null && plan.members().containsKey(instance)
              ? instance
              : plan.members().containsKey(member.getKey()) ? member.getKey() : null;
      if (key == null || !used.add(key)) {
        return Optional.empty();
      }
      keys.put(member.getKey(), key);
    }
    for (Map.Entry<String, Map<org.apache.kafka.common.Uuid, Set<Integer>>> named :
        plan.members().entrySet()) {
      boolean holdsSome = named.getValue().values().stream().anyMatch(p -> !p.isEmpty());
      if (!used.contains(named.getKey()) && holdsSome) {
        return Optional.empty(); // it waits for a member that has not joined yet
      }
    }
    return Optional.of(keys);
  }
}
