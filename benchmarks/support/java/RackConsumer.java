import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Kafka's Java consumer with its rack-aware cooperative-sticky assignor (KIP-881), for
 * benchmarks.rack_fetch. Arguments: BOOTSTRAP GROUP TOPIC RACK. Every poll it prints what it
 * owns ("owned 0 3 ...") and the bytes it read per partition ("read 0:1024 3:2048"); SIGTERM
 * closes it (it leaves the group).
 */
public final class RackConsumer {
  private RackConsumer() {}

  public static void main(String[] args) throws InterruptedException {
    Properties settings = new Properties();
    settings.put("bootstrap.servers", args[0]);
    settings.put("group.id", args[1]);
    settings.put("client.rack", args[3]);
    settings.put("client.id", "java-" + args[3]);
    settings.put("partition.assignment.strategy", CooperativeStickyAssignor.class.getName());
    settings.put("auto.offset.reset", "earliest");
    settings.put("key.deserializer", ByteArrayDeserializer.class.getName());
    settings.put("value.deserializer", ByteArrayDeserializer.class.getName());
    KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(settings);
    CountDownLatch closed = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  consumer.wakeup();
                  try {
                    closed.await();
                  } catch (InterruptedException ignored) {
                    Thread.currentThread().interrupt();
                  }
                }));
    try {
      consumer.subscribe(List.of(args[2]));
      while (true) {
        Map<Integer, Long> read = new TreeMap<>();
        for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
          long size = record.value() == null ? 0 : record.value().length;
          read.merge(record.partition(), size, Long::sum);
        }
        StringBuilder line = new StringBuilder("read");
        read.forEach((partition, size) -> line.append(' ').append(partition).append(':').append(size));
        StringBuilder owned = new StringBuilder("owned");
        for (TopicPartition tp : consumer.assignment()) {
          owned.append(' ').append(tp.partition());
        }
        System.out.println(line);
        System.out.println(owned);
        System.out.flush();
      }
    } catch (WakeupException stopping) {
      // SIGTERM: leave the group below.
    } finally {
      consumer.close();
      closed.countDown();
    }
  }
}
