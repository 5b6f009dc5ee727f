package kafkaautoscaler.broker;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.AtomicInteger;
import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.slf4j.Logger;

/** A plan book's counts as an MBean, registered once per book (one per plans source). */
final class PlanCounts implements PlanCountsMBean {
  static final String DOMAIN = "kafkaautoscaler.broker";
  private static final AtomicInteger SOURCES = new AtomicInteger();
  private final PlanBook book;
  private ObjectName name;

  private PlanCounts(PlanBook book) {
    this.book = book;
  }

  /** Registers ``book``'s counts under the plans topic's name; a failure is logged, not thrown. */
  static PlanCounts register(PlanBook book, String topic, Logger log) {
    PlanCounts counts = new PlanCounts(book);
    try {
      counts.name =
          new ObjectName(
              DOMAIN
                  + ":type=AutoscalerAssignor,topic="
                  + ObjectName.quote(topic)
                  + ",source="
                  + SOURCES.incrementAndGet());
      MBeanServer server = ManagementFactory.getPlatformMBeanServer();
      server.registerMBean(counts, counts.name);
    } catch (JMException | RuntimeException e) {
      log.warn("autoscaler assignor: its counts are not on JMX ({})", e.toString());
      counts.name = null;
    }
    return counts;
  }

  /** Removes the MBean (the broker is shutting down). */
  void unregister() {
    if (name == null) {
      return;
    }
    try {
      ManagementFactory.getPlatformMBeanServer().unregisterMBean(name);
    } catch (JMException e) {
      // already gone: nothing to release
    }
    name = null;
  }

  @Override
  public long getRecordsRead() {
    return book.recordsRead.get();
  }

  @Override
  public long getRecordsRefused() {
    return book.recordsRefused.get();
  }

  @Override
  public long getPlansFollowed() {
    return book.followed.get();
  }

  @Override
  public long getFallbacks() {
    return book.fallbacks.get();
  }

  @Override
  public long getFailures() {
    return book.failures.get();
  }

  @Override
  public int getGroupsWithPlans() {
    return book.groups();
  }
}
