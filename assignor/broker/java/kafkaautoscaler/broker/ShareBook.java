package kafkaautoscaler.broker;

import java.util.Optional;
import java.util.Set;
import org.apache.kafka.common.Uuid;
import org.slf4j.Logger;

/** The newest share loads of each share group, and the loads that cover a group's topics. */
final class ShareBook extends RecordBook<ShareLoads> {
  ShareBook(Logger log, long maxAgeMs, String topic) {
    super(log, maxAgeMs, topic, "autoscaler share assignor", "loads");
  }

  @Override
  ShareLoads parse(byte[] key, byte[] value, long nowMs) throws Plan.Refused {
    return ShareLoads.parse(key, value, nowMs, maxAgeMs);
  }

  @Override
  String group(ShareLoads loads) {
    return loads.group();
  }

  @Override
  long writtenMs(ShareLoads loads) {
    return loads.writtenMs();
  }

  @Override
  String size(ShareLoads loads) {
    return loads.loads().size() + " topics";
  }

  /**
   * The newest fresh loads naming every topic of {@code topics}. The broker does not tell an
   * assignor which group it assigns, so loads are matched by topics: groups reading the same
   * topics share the newest loads (a partition's write speed is the topic's, whichever group
   * reads it).
   */
  Optional<ShareLoads> covering(Set<Uuid> topics, long nowMs) {
    ShareLoads best = null;
    for (ShareLoads loads : records()) {
      if (fresh(loads, nowMs)
          && loads.covers(topics)
          && (best == null || loads.writtenMs() > best.writtenMs())) {
        best = loads;
      }
    }
    return Optional.ofNullable(best);
  }
}
