package kafkaautoscaler.broker;

import java.util.HashSet;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;

/**
 * The newest plan of each group, written by the reader thread and read by the coordinator
 * threads (so every field is safe to share), with the counts an operator reads in the log.
 */
final class PlanBook implements RecordBook {
  private final Map<String, Plan> latest = new ConcurrentHashMap<>();
  private final Set<String> loggedReasons = ConcurrentHashMap.newKeySet();
  private final Logger log;
  final long maxAgeMs;
  final AtomicLong recordsRead = new AtomicLong();
  final AtomicLong recordsRefused = new AtomicLong();
  final AtomicLong plansFollowed = new AtomicLong();
  final AtomicLong fallbacks = new AtomicLong();
  final AtomicLong failures = new AtomicLong();

  PlanBook(Logger log, long maxAgeMs) {
    this.log = log;
    this.maxAgeMs = maxAgeMs;
  }

  /** How many groups have a plan in hand. */
  int groups() {
    return latest.size();
  }

  /** Reads one record of the plans topic: a plan replaces its group's, anything else is counted. */
  @Override
  public void offer(byte[] key, byte[] value, String where, long nowMs) {
    recordsRead.incrementAndGet();
    String reason;
    try {
      Plan plan = Plan.parse(key, value, nowMs, maxAgeMs);
      latest.put(plan.group(), plan);
      log.info(
          "autoscaler assignor: took the plan of group {} written at {} ms ({} members) from {}",
          plan.group(),
          plan.writtenMs(),
          plan.members().size(),
          where);
      return;
    } catch (Plan.Refused refused) {
      reason = refused.reason;
    } catch (RuntimeException unexpected) {
      // Never let one record stop the reader (it would read the same record again forever).
      reason = "unreadable (" + unexpected.getClass().getSimpleName() + ")";
    }
    recordsRefused.incrementAndGet();
    warnOnce(
        "refused:" + reason,
        "autoscaler assignor: ignored the plan record at {}: {} ({} refused so far; "
            + "further ones for this reason are counted, not logged)",
        where,
        reason,
        recordsRefused.get());
  }

  /**
   * The newest fresh plan for the group's members: each member is named once, by its instance
   * id or else its member id, and any member the plan names beyond them is given nothing (a
   * member the sidecar emptied before stopping it, gone or still leaving).
   */
  Optional<Plan> matching(Map<String, Optional<String>> instanceIdByMember, long nowMs) {
    Plan best = null;
    for (Plan plan : latest.values()) {
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
    for (Plan plan : latest.values()) {
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

  private boolean fresh(Plan plan, long nowMs) {
    return plan.writtenMs() >= nowMs - maxAgeMs;
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

  @Override
  public void warnOnce(String reason, String format, Object... arguments) {
    if (loggedReasons.add(reason)) {
      log.warn(format, arguments);
    }
  }
}
