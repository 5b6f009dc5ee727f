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

/**
 * How a share group's members split its partitions by load (pure, no I/O). Loads are in
 * consumers, so one member drains 1. For a goal (a few around the mean load per member, and 1):
 * partitions go largest first, each to the fewest of its least-loaded subscribers that can take
 * equal pieces of it within the goal (a partition at k times the goal gets at least k members),
 * members that read it already first. Of those packings about as balanced as the best, the
 * one adding fewest readers to today's assignment, then with fewest readers ("about as balanced": within 5 % of the best peak, and within 1 if
 * the best is). Today's assignment stays whole while it is about as balanced, so a re-plan
 * moves little. Every
 * assignable partition gets at least one member. Equal pieces are the cautious model: share
 * consumers pull, so a partition's readers split it by what each has free.
 */
final class ShareSpread {
  /** A partition with no measured writes still needs a reader when writes start. */
  static final double LOAD_FLOOR = 1e-6;
  /** A load is in consumers (speed over one consumer's capacity): one member drains 1. */
  static final double CAPACITY = 1.0;
  static final double EPSILON = 1e-9;
  /** The goals tried, as fractions of the mean load per member. */
  static final double[] GOALS = {1.0, 1.01, 1.03, 1.05, 0.97, 0.94, 0.9};
  /** Peaks this close count as equally balanced (then fewer readers win; today's stays). */
  static final double KEEP_WITHIN = 0.05;

  /** One partition of a topic, ordered by topic id then index. */
  record Slot(Uuid topic, int partition) implements Comparable<Slot> {
    private static final Comparator<Slot> ORDER =
        Comparator.comparing((Slot s) -> s.topic().toString()).thenComparingInt(Slot::partition);

    @Override
    public int compareTo(Slot other) {
      return ORDER.compare(this, other);
    }
  }

  private ShareSpread() {}

  /**
   * Each member's partitions. {@code loads} gives a partition's load (a partition it lacks
   * counts as the mean of those it has, or 1 when it has none); {@code current} is what each
   * member reads now.
   */
  static Map<String, Map<Uuid, Set<Integer>>> spread(
      List<String> members,
      Map<String, Set<Uuid>> subscriptions,
      List<Slot> partitions,
      Map<Slot, Double> loads,
      Map<String, Map<Uuid, Set<Integer>>> current) {
    Map<Uuid, List<String>> subscribers = new HashMap<>();
    for (String member : members) {
      for (Uuid topic : subscriptions.getOrDefault(member, Set.of())) {
        subscribers.computeIfAbsent(topic, t -> new ArrayList<>()).add(member);
      }
    }
    List<Slot> readable =
        partitions.stream().filter(s -> subscribers.containsKey(s.topic())).sorted().toList();
    if (readable.isEmpty()) {
      Map<String, Map<Uuid, Set<Integer>>> nothing = new TreeMap<>();
      members.forEach(member -> nothing.put(member, new TreeMap<>()));
      return nothing;
    }
    Map<Slot, Double> effective = effectiveLoads(readable, loads);
    double total = effective.values().stream().mapToDouble(Double::doubleValue).sum();
    double target = total / members.size();
    // Which goal packs best depends on the loads: try a few around the mean and one
    // consumer's capacity; of those about as balanced as the best, the fewest readers.
    List<Packing> packings = new ArrayList<>();
    for (double goal : GOALS) {
      packings.add(fill(members, subscribers, readable, effective, current, target * goal));
    }
    if (target < CAPACITY) {
      packings.add(fill(members, subscribers, readable, effective, current, CAPACITY));
    }
    double lowest = packings.stream().mapToDouble(Packing::max).min().orElseThrow();
    // About as balanced: within KEEP_WITHIN of the best, never over capacity if it is not.
    double limit =
        (lowest <= CAPACITY ? Math.min(lowest * (1 + KEEP_WITHIN), CAPACITY) : lowest * 1.01)
            + EPSILON;
    Packing filled =
        packings.stream()
            .filter(p -> p.max() <= limit)
            .min(
                Comparator.comparingLong((Packing p) -> p.moves(current))
                    .thenComparingLong(Packing::readers)
                    .thenComparingDouble(Packing::max))
            .orElseThrow();
    // Today's assignment stays while it is about as balanced:
    // identical loads and members give the assignment they already have.
    Packing now = asIs(members, subscribers, readable, effective, current);
    return now != null && now.max() <= limit ? now.owned() : filled.owned();
  }

  /**
   * Today's assignment as a packing, if every partition has a reader and nobody reads a
   * partition it may not; else null.
   */
  private static Packing asIs(
      List<String> members,
      Map<Uuid, List<String>> subscribers,
      List<Slot> readable,
      Map<Slot, Double> effective,
      Map<String, Map<Uuid, Set<Integer>>> current) {
    Map<Slot, List<String>> readers = new HashMap<>();
    for (Slot slot : readable) {
      List<String> reading =
          subscribers.get(slot.topic()).stream()
              .filter(m -> reads(current.getOrDefault(m, Map.of()), slot))
              .toList();
      if (reading.isEmpty()) {
        return null;
      }
      readers.put(slot, reading);
    }
    Map<String, Map<Uuid, Set<Integer>>> owned = new TreeMap<>();
    Map<String, Double> load = new HashMap<>();
    for (String member : members) {
      owned.put(member, new TreeMap<>());
      load.put(member, 0.0);
    }
    int held = 0;
    for (Map.Entry<Slot, List<String>> slot : readers.entrySet()) {
      double piece = effective.get(slot.getKey()) / slot.getValue().size();
      for (String member : slot.getValue()) {
        owned.get(member)
            .computeIfAbsent(slot.getKey().topic(), t -> new TreeSet<>())
            .add(slot.getKey().partition());
        load.merge(member, piece, Double::sum);
        held++;
      }
    }
    long before =
        members.stream()
            .flatMap(m -> current.getOrDefault(m, Map.of()).values().stream())
            .mapToLong(Set::size)
            .sum();
    return held == before ? new Packing(owned, load) : null;
  }

  /** One way of placing the partitions: each member's partitions and load. */
  private record Packing(Map<String, Map<Uuid, Set<Integer>>> owned, Map<String, Double> load) {
    double max() {
      return load.values().stream().mapToDouble(Double::doubleValue).max().orElse(0);
    }

    /** How many (member, partition) pairs read that {@code current} does not. */
    long moves(Map<String, Map<Uuid, Set<Integer>>> current) {
      long moves = 0;
      for (Map.Entry<String, Map<Uuid, Set<Integer>>> member : owned.entrySet()) {
        Map<Uuid, Set<Integer>> before = current.getOrDefault(member.getKey(), Map.of());
        for (Map.Entry<Uuid, Set<Integer>> topic : member.getValue().entrySet()) {
          Set<Integer> had = before.getOrDefault(topic.getKey(), Set.of());
          moves += topic.getValue().stream().filter(p -> !had.contains(p)).count();
        }
      }
      return moves;
    }

    /** How many (member, partition) pairs read. */
    long readers() {
      return owned.values().stream()
          .flatMap(topics -> topics.values().stream())
          .mapToLong(Set::size)
          .sum();
    }

  }

  /**
   * Partitions by load, largest first, each split into the fewest equal pieces that fit on as
   * many of its least-loaded subscribers without passing {@code goal},
   * preferring members that read it already; where no split fits, the one with the lowest peak.
   */
  private static Packing fill(
      List<String> members,
      Map<Uuid, List<String>> subscribers,
      List<Slot> readable,
      Map<Slot, Double> effective,
      Map<String, Map<Uuid, Set<Integer>>> current,
      double goal) {
    Map<String, Map<Uuid, Set<Integer>>> owned = new TreeMap<>();
    Map<String, Double> load = new HashMap<>();
    for (String member : members) {
      owned.put(member, new TreeMap<>());
      load.put(member, 0.0);
    }
    List<Slot> order = new ArrayList<>(readable);
    order.sort(
        Comparator.comparingDouble((Slot s) -> effective.get(s)).reversed()
            .thenComparing(Comparator.naturalOrder()));
    for (Slot slot : order) {
      double partitionLoad = effective.get(slot);
      List<String> eligible = new ArrayList<>(subscribers.get(slot.topic()));
      eligible.sort(
          Comparator.comparingDouble((String m) -> load.get(m)).thenComparing(Comparator.naturalOrder()));
      int readers = fewestReaders(partitionLoad, eligible, load, goal);
      double piece = partitionLoad / readers;
      List<String> chosen = new ArrayList<>();
      for (String member : eligible) {
        if (chosen.size() < readers
            && reads(current.getOrDefault(member, Map.of()), slot)
            && load.get(member) + piece <= goal) {
          chosen.add(member);
        }
      }
      for (String member : eligible) {
        if (chosen.size() < readers && !chosen.contains(member)) {
          chosen.add(member);
        }
      }
      for (String member : chosen) {
        owned.get(member).computeIfAbsent(slot.topic(), t -> new TreeSet<>()).add(slot.partition());
        load.merge(member, piece, Double::sum);
      }
    }
    return new Packing(owned, load);
  }

  /**
   * The fewest of {@code eligible} (least-loaded first) that take equal pieces of the load
   * within {@code goal}; else the fewest giving about the lowest peak.
   */
  private static int fewestReaders(
      double partitionLoad, List<String> eligible, Map<String, Double> load, double goal) {
    double[] peaks = new double[eligible.size() + 1];
    double lowest = Double.MAX_VALUE;
    for (int readers = 1; readers <= eligible.size(); readers++) {
      peaks[readers] = load.get(eligible.get(readers - 1)) + partitionLoad / readers;
      if (peaks[readers] <= goal) {
        return readers;
      }
      lowest = Math.min(lowest, peaks[readers]);
    }
    // Nothing fits: the fewest readers whose peak is within a hundredth of the goal of the
    // lowest (spreading a partition over every member to save a sliver is not worth it).
    for (int readers = 1; readers < peaks.length; readers++) {
      if (peaks[readers] <= lowest + goal * 0.01) {
        return readers;
      }
    }
    return eligible.size();
  }


  private static Map<Slot, Double> effectiveLoads(List<Slot> slots, Map<Slot, Double> loads) {
    double known = 0;
    int count = 0;
    for (Slot slot : slots) {
      Double load = loads.get(slot);
      if (load != null) {
        known += load;
        count++;
      }
    }
    double unknown = count == 0 ? 1.0 : known / count;
    Map<Slot, Double> effective = new HashMap<>();
    for (Slot slot : slots) {
      effective.put(slot, Math.max(LOAD_FLOOR, loads.getOrDefault(slot, unknown)));
    }
    return effective;
  }

  private static boolean reads(Map<Uuid, Set<Integer>> owned, Slot slot) {
    return owned.getOrDefault(slot.topic(), Set.of()).contains(slot.partition());
  }
}
