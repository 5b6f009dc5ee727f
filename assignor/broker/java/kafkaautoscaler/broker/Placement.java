package kafkaautoscaler.broker;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.GroupSpec;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;

/**
 * Where each partition goes: where the plan puts it, or else (no plan, or a partition the plan
 * does not name) with the member already owning it while that member is at or under an even
 * share, else with the subscribed member holding fewest partitions. Control members get nothing.
 */
final class Placement {
  private final GroupSpec spec;
  private final SubscribedTopicDescriber topics;
  private final List<String> members; // sorted, so ties break the same way every time
  private final Map<String, Map<Uuid, Set<Integer>>> owned = new HashMap<>();
  private final Map<String, Integer> counts = new HashMap<>();
  private final Map<Uuid, Set<Integer>> placed = new HashMap<>();
  private final List<Slot> assignable;

  Placement(GroupSpec spec, SubscribedTopicDescriber topics, List<String> members) {
    this.spec = spec;
    this.topics = topics;
    this.members = members;
    for (String member : members) {
      owned.put(member, new TreeMap<>());
      counts.put(member, 0);
    }
    assignable = listAssignable();
  }

  /** Gives {@code member} the partition if it is valid for it and nobody has it yet. */
  boolean give(String member, Uuid topic, int partition) {
    if (!spec.memberSubscription(member).subscribedTopicIds().contains(topic)
        || partition < 0
        || partition >= topics.numPartitions(topic)
        || !spec.isPartitionAssignable(topic, partition)
        || !placed.computeIfAbsent(topic, t -> new TreeSet<>()).add(partition)) {
      return false;
    }
    owned.get(member).computeIfAbsent(topic, t -> new TreeSet<>()).add(partition);
    counts.merge(member, 1, Integer::sum);
    return true;
  }

  /** Follows the plan: each member gets what its key names, where valid. */
  void follow(Plan plan, Map<String, String> keyByMember) {
    for (String member : members) {
      Map<Uuid, Set<Integer>> planned = plan.members().get(keyByMember.get(member));
      for (Map.Entry<Uuid, Set<Integer>> topic : new TreeMap<>(planned).entrySet()) {
        for (int partition : topic.getValue()) {
          give(member, topic.getKey(), partition);
        }
      }
    }
  }

  /**
   * Keeps each member's current partitions up to its even share plus {@code slack} (of P
   * partitions over N members, P mod N members may keep one more: those holding most now),
   * lowest partitions first: the sticky half of the fallback.
   */
  void keepCurrent(int slack) {
    int total = assignable.size();
    long base = (long) total / Math.max(1, members.size()) + slack;
    int extra = total % Math.max(1, members.size());
    List<String> byHolding = new ArrayList<>(members);
    byHolding.sort(Comparator.comparingInt(this::currentCount).reversed());
    for (int rank = 0; rank < byHolding.size(); rank++) {
      String member = byHolding.get(rank);
      long share = base + (rank < extra ? 1 : 0);
      MemberAssignment current = spec.memberAssignment(member);
      if (current == null) {
        continue;
      }
      for (Map.Entry<Uuid, Set<Integer>> topic : new TreeMap<>(current.partitions()).entrySet()) {
        for (int partition : new TreeSet<>(topic.getValue())) {
          if (counts.get(member) < share) {
            give(member, topic.getKey(), partition);
          }
        }
      }
    }
  }

  private int currentCount(String member) {
    MemberAssignment current = spec.memberAssignment(member);
    return current == null
        ? 0
        : current.partitions().values().stream().mapToInt(Set::size).sum();
  }

  /** Every partition nobody has yet goes to its subscriber holding fewest partitions. */
  void placeRest() {
    for (Slot slot : assignable) {
      if (placed.getOrDefault(slot.topic(), Set.of()).contains(slot.partition())) {
        continue;
      }
      members.stream()
          .filter(m -> spec.memberSubscription(m).subscribedTopicIds().contains(slot.topic()))
          .min(Comparator.comparingInt(counts::get))
          .ifPresent(m -> give(m, slot.topic(), slot.partition()));
    }
  }

  /** Every assignable partition of a topic some member subscribes to, in a fixed order. */
  private List<Slot> listAssignable() {
    Set<Uuid> subscribed = new TreeSet<>();
    for (String member : members) {
      subscribed.addAll(spec.memberSubscription(member).subscribedTopicIds());
    }
    List<Slot> all = new ArrayList<>();
    for (Uuid topic : subscribed) {
      int count = topics.numPartitions(topic);
      for (int partition = 0; partition < count; partition++) {
        if (spec.isPartitionAssignable(topic, partition)) {
          all.add(new Slot(topic, partition));
        }
      }
    }
    return all;
  }

  private record Slot(Uuid topic, int partition) {}

  /** The result: every placed member's partitions. */
  Map<String, Map<Uuid, Set<Integer>>> result() {
    return owned;
  }
}
