package kafkaautoscaler.broker;

import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.Uuid;
import org.slf4j.Logger;

/**
 * The newest share loads of each share group, written by the reader thread and read by the
 * coordinator threads, with the counts an operator reads in the log.
 */
final class ShareBook implements RecordBook {
  private final Map<String, ShareLoads> latest = new ConcurrentHashMap<>();
  private final Set<String> loggedReasons = ConcurrentHashMap.newKeySet();
  private final Logger log;
  final long maxAgeMs;
  final AtomicLong recordsRead = new AtomicLong();
  final AtomicLong recordsRefused = new AtomicLong();
  final AtomicLong loadsFollowed = new AtomicLong();
  final AtomicLong fallbacks = new AtomicLong();
  final AtomicLong failures = new AtomicLong();

  ShareBook(Logger log, long maxAgeMs) {
    this.log = log;
    this.maxAgeMs = maxAgeMs;
  }

  @Override
  public void offer(byte[] key, byte[] value, String where, long nowMs) {
    recordsRead.incrementAndGet();
    String reason;
    try {
      ShareLoads loads = ShareLoads.parse(key, value, nowMs, maxAgeMs);
      latest.put(loads.group(), loads);
      log.info(
          "autoscaler share assignor: took the loads of group {} written at {} ms ({} topics) "
              + "from {}",
          loads.group(),
          loads.writtenMs(),
          loads.loads().size(),
          where);
      return;
    } catch (Plan.Refused refused) {
      reason = refused.reason;
    } catch (RuntimeException unexpected) {
      reason = "unreadable (" + unexpected.getClass().getSimpleName() + ")";
    }
    recordsRefused.incrementAndGet();
    warnOnce(
        "refused:" + reason,
        "autoscaler share assignor: ignored the loads record at {}: {} ({} refused so far; "
            + "further ones for this reason are counted, not logged)",
        where,
        reason,
        recordsRefused.get());
  }

  /**
   * The newest fresh loads naming every topic of {@code topics}. The broker does not tell an
   * assignor which group it assigns, so loads are matched by topics: groups reading the same
   * topics share the newest loads (a partition's write speed is the topic's, whichever group
   * reads it).
   */
  Optional<ShareLoads> covering(Set<Uuid> topics, long nowMs) {
    ShareLoads best = null;
    for (ShareLoads loads : latest.values()) {
      if (loads.writtenMs() >= nowMs - maxAgeMs
          && loads.covers(topics)
          && (best == null || loads.writtenMs() > best.writtenMs())) {
        best = loads;
      }
    }
    return Optional.ofNullable(best);
  }

  @Override
  public void warnOnce(String reason, String format, Object... arguments) {
    if (loggedReasons.add(reason)) {
      log.warn(format, arguments);
    }
  }
}
