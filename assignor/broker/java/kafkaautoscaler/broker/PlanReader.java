package kafkaautoscaler.broker;

import java.time.Duration;
import java.util.HashSet;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads the topics of the sidecar's that a book takes (each group's plans topic, or the share
 * loads topic) from their start into the book, on a daemon thread with its own client, so
 * that assign() never waits on the network. It looks for new topics every few seconds (a
 * group's first plan makes its topic). Any error is logged once, then retried.
 */
final class PlanReader implements Runnable {
  private static final Duration POLL = Duration.ofMillis(500);
  private static final long RETRY_MS = 1000;
  /** How often the reader lists the topics: a new group's plan is followed this late at most. */
  static final long DISCOVER_MS = 2000;
  private final Properties client = new Properties();
  private final RecordBook<?> book;
  private final Thread thread;
  private volatile boolean stopping;
  private volatile KafkaConsumer<byte[], byte[]> consumer;

  PlanReader(String bootstrap, Map<String, String> clientSettings, RecordBook<?> book) {
    this.book = book;
    client.putAll(clientSettings);
    client.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    client.put(ConsumerConfig.CLIENT_ID_CONFIG, "autoscaler-assignor-" + book.topic);
    client.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    client.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    // Reading must never create the topic (the broker may auto-create topics for clients).
    client.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
    // The broker itself may still be starting: retry gently, not every 50 ms.
    client.put(ConsumerConfig.RECONNECT_BACKOFF_MS_CONFIG, "1000");
    client.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "10000");
    client.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    client.put(
        ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    thread = new Thread(this, "autoscaler-assignor-" + book.topic);
    thread.setDaemon(true);
  }

  void start() {
    thread.start();
  }

  @Override
  public void run() {
    while (!stopping) {
      try (KafkaConsumer<byte[], byte[]> reader = new KafkaConsumer<>(client)) {
        consumer = reader;
        readFrom(reader);
      } catch (WakeupException e) {
        return;
      } catch (RuntimeException e) {
        book.warnOnce(
            "reader:" + e.getClass().getName(),
            "autoscaler assignor: reading {} failed ({}); retrying every {} ms, groups get "
                + "the fallback until a record arrives",
            book.topic,
            e.toString(),
            RETRY_MS);
        pause();
      } finally {
        consumer = null;
      }
    }
  }

  private void readFrom(KafkaConsumer<byte[], byte[]> reader) {
    Set<TopicPartition> assigned = Set.of();
    long listedAt = 0;
    while (!stopping) {
      long now = System.currentTimeMillis();
      if (assigned.isEmpty() || now - listedAt >= DISCOVER_MS) {
        Set<TopicPartition> found = partitionsRead(reader);
        listedAt = now;
        if (!found.equals(assigned)) {
          Set<TopicPartition> added = new HashSet<>(found);
          added.removeAll(assigned);
          reader.assign(found); // positions of the partitions kept are kept
          reader.seekToBeginning(added);
          assigned = found;
        }
      }
      if (assigned.isEmpty()) {
        book.warnOnce(
            "reader:no-topic",
            "autoscaler assignor: no topic {} yet; waiting for the sidecar to create it",
            book.topicsRead());
        pause();
        continue;
      }
      for (ConsumerRecord<byte[], byte[]> record : reader.poll(POLL)) {
        String where = record.topic() + "-" + record.partition() + "@" + record.offset();
        book.offer(
            record.topic(), record.key(), record.value(), where, System.currentTimeMillis());
      }
    }
  }

  /** The partitions of every topic the book reads, as the brokers list them now. */
  private Set<TopicPartition> partitionsRead(KafkaConsumer<byte[], byte[]> reader) {
    Set<TopicPartition> found = new HashSet<>();
    reader
        .listTopics(Duration.ofSeconds(10))
        .forEach(
            (name, partitions) -> {
              if (book.reads(name)) {
                for (PartitionInfo partition : partitions) {
                  found.add(new TopicPartition(name, partition.partition()));
                }
              }
            });
    return found;
  }

  private void pause() {
    try {
      Thread.sleep(RETRY_MS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      stopping = true;
    }
  }

  /** Stops the thread and waits for it a little (the broker is shutting down). */
  void close() {
    stopping = true;
    KafkaConsumer<byte[], byte[]> current = consumer;
    if (current != null) {
      current.wakeup();
    }
    thread.interrupt();
    try {
      thread.join(5000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
