package kafkaautoscaler.broker;

import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.config.ConfigException;

/**
 * Where an assignor reads the sidecar's records: the broker properties both assignors share
 * ({@code autoscaler.plans.bootstrap.servers}, {@code autoscaler.plans.max.age.ms}, the {@code
 * autoscaler.plans.client.} prefix) and the topic each one reads.
 */
record SourceSettings(String bootstrap, String topic, long maxAgeMs, Map<String, String> client) {
  static final String BOOTSTRAP_CONFIG = "autoscaler.plans.bootstrap.servers";
  static final String MAX_AGE_CONFIG = "autoscaler.plans.max.age.ms";
  /** Settings under this prefix go to the reader's client (security, for example). */
  static final String CLIENT_PREFIX = "autoscaler.plans.client.";
  static final long DEFAULT_MAX_AGE_MS = 600_000;

  /**
   * The settings in a broker's {@code configs}; {@code bootstrap} is null when it is not set
   * (nothing is read then). A bad max age is refused as the broker refuses its own settings.
   */
  static SourceSettings read(Map<String, ?> configs, String topicConfig, String defaultTopic) {
    long maxAgeMs = DEFAULT_MAX_AGE_MS;
    Object age = configs.get(MAX_AGE_CONFIG);
    if (age != null) {
      try {
        maxAgeMs = Long.parseLong(age.toString().trim());
      } catch (NumberFormatException e) {
        maxAgeMs = -1;
      }
      if (maxAgeMs < 1000 || maxAgeMs > 86_400_000) {
        throw new ConfigException(
            MAX_AGE_CONFIG, age, "must be an integer in [1000, 86400000] (milliseconds)");
      }
    }
    Object bootstrap = configs.get(BOOTSTRAP_CONFIG);
    Object topic = configs.get(topicConfig);
    Map<String, String> client = new TreeMap<>();
    configs.forEach(
        (key, value) -> {
          if (key.startsWith(CLIENT_PREFIX) && value != null) {
            client.put(key.substring(CLIENT_PREFIX.length()), value.toString());
          }
        });
    return new SourceSettings(
        bootstrap == null || bootstrap.toString().isBlank() ? null : bootstrap.toString(),
        topic == null || topic.toString().isBlank() ? defaultTopic : topic.toString(),
        maxAgeMs,
        client);
  }

  /** The same for every assignor instance configured alike: they share one book and reader. */
  String key() {
    return bootstrap + "|" + topic + "|" + maxAgeMs + "|" + client;
  }
}
