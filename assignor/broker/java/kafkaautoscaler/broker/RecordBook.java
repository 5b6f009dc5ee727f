package kafkaautoscaler.broker;

import java.util.Collection;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;

/**
 * The newest record of each group that a {@link PlanReader} read from one of the sidecar's
 * topics (a plan, or share loads), written by the reader thread and read by the coordinator
 * threads (so every field is safe to share), with the counts an operator reads in the log.
 */
abstract class RecordBook<T> {
  /**
   * The most groups kept at once: a record of a group not yet kept is refused beyond it
   * (records older than the max age are dropped first, so only that many live groups count).
   */
  static final int MAX_GROUPS = 10_000;

  private final Map<String, T> latest = new ConcurrentHashMap<>();
  private final Set<String> loggedReasons = ConcurrentHashMap.newKeySet();
  private final String speaker;
  private final String noun;
  final Logger log;
  final long maxAgeMs;
  /** The configured topic: the one read, or the prefix of one topic per group. */
  final String topic;
  final AtomicLong recordsRead = new AtomicLong();
  final AtomicLong recordsRefused = new AtomicLong();
  final AtomicLong followed = new AtomicLong();
  final AtomicLong fallbacks = new AtomicLong();
  final AtomicLong failures = new AtomicLong();

  /** {@code speaker} starts each log line; {@code noun} names a record ("plan", "loads"). */
  RecordBook(Logger log, long maxAgeMs, String topic, String speaker, String noun) {
    this.log = log;
    this.maxAgeMs = maxAgeMs;
    this.topic = topic;
    this.speaker = speaker;
    this.noun = noun;
  }

  /** The record in a key and value, checked against the clock, or why not. */
  abstract T parse(byte[] key, byte[] value, long nowMs) throws Plan.Refused;

  abstract String group(T record);

  abstract long writtenMs(T record);

  /** What the log says of a record taken ("3 members"). */
  abstract String size(T record);

  /** Whether the reader reads the topic {@code name} into this book. */
  boolean reads(String name) {
    return name.equals(topic);
  }

  /** The only topic a record of {@code group} is taken from. */
  String topicOf(String group) {
    return topic;
  }

  /** The topics read, for a log line. */
  String topicsRead() {
    return topic;
  }

  /** How many groups have a record in hand. */
  int groups() {
    return latest.size();
  }

  /** Every group's newest record. */
  Collection<T> records() {
    return latest.values();
  }

  /** Whether a record is younger than the max age. */
  boolean fresh(T record, long nowMs) {
    return writtenMs(record) >= nowMs - maxAgeMs;
  }

  /**
   * Reads one record of {@code from} (a topic): it replaces its group's; anything unreadable,
   * or a group's record in a topic not its own, is counted. Never throws.
   */
  void offer(String from, byte[] key, byte[] value, String where, long nowMs) {
    recordsRead.incrementAndGet();
    String reason;
    try {
      T record = parse(key, value, nowMs);
      if (!from.equals(topicOf(group(record)))) {
        // Whoever may write one group's topic must not steer another group.
        throw new Plan.Refused(
            "it names another group (a group's " + noun + " is read from " + topicsRead()
                + " only)");
      }
      forgetStale(nowMs);
      if (!latest.containsKey(group(record)) && latest.size() >= MAX_GROUPS) {
        throw new Plan.Refused(
            "the book holds " + MAX_GROUPS + " groups' fresh records already; "
                + "a new group's is refused until some go stale");
      }
      latest.put(group(record), record);
      log.info(
          "{}: took the {} of group {} written at {} ms ({}) from {}",
          speaker,
          noun,
          printable(group(record)),
          writtenMs(record),
          size(record),
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
        "{}: ignored the {} record at {}: {} ({} refused so far; further ones for this reason "
            + "are counted, not logged)",
        speaker,
        noun,
        where,
        reason,
        recordsRefused.get());
  }

  /** Drops the records older than the max age: never followed again, they only took room. */
  void forgetStale(long nowMs) {
    latest.values().removeIf(record -> !fresh(record, nowMs));
  }

  /**
   * {@code text} safe for one log line: control and non-ASCII characters escaped as \\uXXXX,
   * at most 200 characters (a group id or key comes from whoever can write the topic).
   */
  static String printable(String text) {
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < text.length() && out.length() < 200; i++) {
      char c = text.charAt(i);
      if (c >= 0x20 && c < 0x7f && c != '\\') {
        out.append(c);
      } else {
        out.append(String.format("\\u%04x", (int) c));
      }
    }
    return text.length() > 200 ? out + "..." : out.toString();
  }

  /** Logs a warning the first time {@code reason} happens, never again after. */
  void warnOnce(String reason, String format, Object... arguments) {
    if (loggedReasons.add(reason)) {
      log.warn(format, arguments);
    }
  }
}
