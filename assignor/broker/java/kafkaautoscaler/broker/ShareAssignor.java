package kafkaautoscaler.broker;

import java.io.Closeable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.common.Configurable;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.GroupSpec;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.ShareGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.assignor.SimpleAssignor;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The share-group (KIP-932) assignor: each partition is read by members in proportion to the
 * load the kafka-autoscaler sidecar published for it (a partition written at 5 consumers'
 * capacity gets 5 members), sticky across re-plans; Kafka's own {@code simple} assignor when no
 * fresh loads name the group's topics.
 *
 * <p>Enable it on every broker with {@code group.share.assignors=
 * kafkaautoscaler.broker.ShareAssignor} (it then serves every share group) and {@code
 * autoscaler.plans.bootstrap.servers}. It runs on the coordinator's threads: it never blocks
 * (loads are read by a thread of its own) and never throws (a failure falls back to {@code
 * simple} and is logged once).
 */
public final class ShareAssignor implements ShareGroupPartitionAssignor, Configurable, Closeable {
  public static final String NAME = "autoscaler-share";
  public static final String TOPIC_CONFIG = "autoscaler.share.loads.topic";
  public static final String DEFAULT_TOPIC = "_autoscaler_share_loads";

  private static final Logger LOG = LoggerFactory.getLogger(ShareAssignor.class);
  private static final SharedBooks<ShareBook> BOOKS = new SharedBooks<>();
  private final SimpleAssignor simple = new SimpleAssignor();
  private ShareBook book = new ShareBook(LOG, SourceSettings.DEFAULT_MAX_AGE_MS, DEFAULT_TOPIC);

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public void configure(Map<String, ?> configs) {
    SourceSettings source = SourceSettings.read(configs, TOPIC_CONFIG, DEFAULT_TOPIC);
    if (source.bootstrap() == null) {
      book = new ShareBook(LOG, source.maxAgeMs(), source.topic());
      LOG.warn(
          "autoscaler share assignor: {} is not set, so no loads are read: share groups get "
              + "Kafka's simple assignment",
          SourceSettings.BOOTSTRAP_CONFIG);
      return;
    }
    book =
        BOOKS.bookFor(
            source, settings -> new ShareBook(LOG, settings.maxAgeMs(), settings.topic()), made -> {});
  }

  @Override
  public GroupAssignment assign(GroupSpec spec, SubscribedTopicDescriber topics) {
    try {
      return place(spec, topics);
    } catch (RuntimeException e) {
      book.failures.incrementAndGet();
      book.warnOnce(
          "assign-failed",
          "autoscaler share assignor: assign() failed ({}); the group gets Kafka's simple "
              + "assignment ({} failures so far; further ones are counted, not logged)",
          e.toString(),
          book.failures.get());
      return simple.assign(spec, topics);
    }
  }

  private GroupAssignment place(GroupSpec spec, SubscribedTopicDescriber topics) {
    List<String> members = spec.memberIds().stream().sorted().toList();
    Map<String, Set<Uuid>> subscriptions = new HashMap<>();
    Set<Uuid> subscribed = new TreeSet<>();
    Map<String, Map<Uuid, Set<Integer>>> current = new HashMap<>();
    for (String member : members) {
      Set<Uuid> topicIds = spec.memberSubscription(member).subscribedTopicIds();
      subscriptions.put(member, topicIds);
      subscribed.addAll(topicIds);
      MemberAssignment owned = spec.memberAssignment(member);
      current.put(member, owned == null ? Map.of() : owned.partitions());
    }
    Optional<ShareLoads> loads = book.covering(subscribed, System.currentTimeMillis());
    if (loads.isEmpty()) {
      book.fallbacks.incrementAndGet();
      book.warnOnce(
          "no-loads",
          "autoscaler share assignor: no fresh loads name a share group's topics; it gets "
              + "Kafka's simple assignment (counted from now on, logged once)");
      return simple.assign(spec, topics);
    }
    List<ShareSpread.Slot> partitions = new ArrayList<>();
    Map<ShareSpread.Slot, Double> partitionLoads = new HashMap<>();
    for (Uuid topic : subscribed) {
      double[] published = loads.get().loads().get(topic);
      int count = topics.numPartitions(topic);
      for (int partition = 0; partition < count; partition++) {
        if (spec.isPartitionAssignable(topic, partition)) {
          ShareSpread.Slot slot = new ShareSpread.Slot(topic, partition);
          partitions.add(slot);
          if (partition < published.length) {
            partitionLoads.put(slot, published[partition]);
          }
        }
      }
    }
    Map<String, MemberAssignment> result = new HashMap<>();
    ShareSpread.spread(members, subscriptions, partitions, partitionLoads, current)
        .forEach((member, owned) -> result.put(member, new Assigned(owned)));
    book.followed.incrementAndGet();
    LOG.info(
        "autoscaler share assignor: {} members over {} partitions by the loads of group {}; "
            + "loads followed {}, fallbacks {}, records refused {}",
        members.size(),
        partitions.size(),
        loads.get().group(),
        book.followed.get(),
        book.fallbacks.get(),
        book.recordsRefused.get());
    return new GroupAssignment(result);
  }

  /** Stops the loads readers (the broker is shutting down). */
  @Override
  public void close() {
    BOOKS.close();
  }
}
