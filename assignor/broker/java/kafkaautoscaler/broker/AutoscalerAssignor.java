package kafkaautoscaler.broker;

import java.io.Closeable;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.common.Configurable;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.GroupSpec;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The broker-side (KIP-848) assignor {@code autoscaler}: a group's members get the partitions
 * of the plan the kafka-autoscaler sidecar published for exactly these members (the sidecar's
 * speed-aware packing), and a sticky, even spread when no such plan is fresh.
 *
 * <p>Enable it on every broker with {@code group.consumer.assignors=uniform,range,
 * kafkaautoscaler.broker.AutoscalerAssignor} (other groups keep {@code uniform}) and {@code
 * autoscaler.plans.bootstrap.servers}; consumers choose it with {@code
 * group.remote.assignor=autoscaler}. It runs on the coordinator's threads: it never blocks
 * (plans are read by a thread of its own) and never throws (a failure keeps every member's
 * current partitions and is logged once).
 */
public final class AutoscalerAssignor
    implements ConsumerGroupPartitionAssignor, Configurable, Closeable {
  public static final String NAME = "autoscaler";
  public static final String BOOTSTRAP_CONFIG = SourceSettings.BOOTSTRAP_CONFIG;
  public static final String TOPIC_CONFIG = "autoscaler.plans.topic";
  public static final String MAX_AGE_CONFIG = SourceSettings.MAX_AGE_CONFIG;
  public static final String CLIENT_PREFIX = SourceSettings.CLIENT_PREFIX;
  public static final String DEFAULT_TOPIC = "_autoscaler_plans";
  /** Members whose instance id starts so are the sidecar's: they get no partitions. */
  public static final String CONTROL_PREFIX = "autoscaler-control";

  private static final Logger LOG = LoggerFactory.getLogger(AutoscalerAssignor.class);
  private static final SharedBooks<PlanBook> BOOKS = new SharedBooks<>();
  private static final Map<String, PlanCounts> COUNTS = new HashMap<>();
  private PlanBook book = new PlanBook(LOG, SourceSettings.DEFAULT_MAX_AGE_MS, DEFAULT_TOPIC);

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public void configure(Map<String, ?> configs) {
    SourceSettings source = SourceSettings.read(configs, TOPIC_CONFIG, DEFAULT_TOPIC);
    if (source.bootstrap() == null) {
      book = new PlanBook(LOG, source.maxAgeMs(), source.topic());
      LOG.warn(
          "autoscaler assignor: {} is not set, so no plans are read: groups choosing "
              + "'autoscaler' get the sticky even spread",
          BOOTSTRAP_CONFIG);
      return;
    }
    book =
        BOOKS.bookFor(
            source,
            settings -> new PlanBook(LOG, settings.maxAgeMs(), settings.topic()),
            made -> {
              synchronized (COUNTS) {
                COUNTS.put(source.key(), PlanCounts.register(made, source.topic(), LOG));
              }
            });
  }

  @Override
  public GroupAssignment assign(GroupSpec spec, SubscribedTopicDescriber topics) {
    try {
      return place(spec, topics);
    } catch (RuntimeException e) {
      book.failures.incrementAndGet();
      book.warnOnce(
          "assign-failed",
          "autoscaler assignor: assign() failed ({}); every member keeps its partitions "
              + "({} failures so far; further ones are counted, not logged)",
          e.toString(),
          book.failures.get());
      return keepEverything(spec);
    }
  }

  private GroupAssignment place(GroupSpec spec, SubscribedTopicDescriber topics) {
    Map<String, Optional<String>> instances = new HashMap<>();
    List<String> control = new java.util.ArrayList<>();
    for (String member : spec.memberIds()) {
      Optional<String> instance = spec.memberSubscription(member).instanceId();
      if (instance.filter(id -> id.startsWith(CONTROL_PREFIX)).isPresent()) {
        control.add(member);
      } else {
        instances.put(member, instance);
      }
    }
    List<String> members = instances.keySet().stream().sorted().toList();
    Placement placement = new Placement(spec, topics, members);
    long now = System.currentTimeMillis();
    Optional<Plan> plan = book.matching(instances, now);
    if (plan.isPresent()) {
      book.followed.incrementAndGet();
      placement.follow(plan.get(), PlanBook.keysFor(plan.get(), instances).orElseThrow());
    } else if (book.anyPlanNames(instances, now)) {
      // Between two plans of the sidecar's (a member it plans for has not joined yet):
      // nobody moves, whatever the spread; only partitions without an owner are placed.
      book.fallbacks.incrementAndGet();
      placement.keepCurrent(Integer.MAX_VALUE);
    } else {
      book.fallbacks.incrementAndGet();
      book.warnOnce(
          "no-plan",
          "autoscaler assignor: no fresh plan names a group's members; it gets the sticky "
              + "even spread (counted from now on, logged once)");
      placement.keepCurrent(0);
    }
    placement.placeRest();
    Map<String, MemberAssignment> result = new HashMap<>();
    placement.result().forEach((member, owned) -> result.put(member, new Assigned(owned)));
    for (String member : control) {
      result.put(member, new Assigned(Map.of()));
    }
    LOG.info(
        "autoscaler assignor: {} members and {} control, {}; plans followed {}, fallbacks {}, "
            + "records refused {}",
        members.size(),
        control.size(),
        plan.map(p -> "following the plan of group " + p.group()).orElse("no plan"),
        book.followed.get(),
        book.fallbacks.get(),
        book.recordsRefused.get());
    return new GroupAssignment(result);
  }

  private static GroupAssignment keepEverything(GroupSpec spec) {
    Map<String, MemberAssignment> result = new HashMap<>();
    for (String member : spec.memberIds()) {
      MemberAssignment current = spec.memberAssignment(member);
      Map<Uuid, Set<Integer>> owned = current == null ? Map.of() : current.partitions();
      result.put(member, new Assigned(owned));
    }
    return new GroupAssignment(result);
  }

  /** Stops the plans readers (the broker is shutting down). */
  @Override
  public void close() {
    BOOKS.close();
    synchronized (COUNTS) {
      COUNTS.values().forEach(PlanCounts::unregister);
      COUNTS.clear();
    }
  }
}
