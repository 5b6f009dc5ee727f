package kafkaautoscaler.broker;

/**
 * The assignor's counts over JMX ({@code kafkaautoscaler.broker:type=AutoscalerAssignor,...}),
 * for the brokers' metrics exporter: a fallback or refusal rising is the sidecar not being
 * followed.
 */
public interface PlanCountsMBean {
  /** Records read from the plans topic. */
  long getRecordsRead();

  /** Records that were not a plan (each reason is logged once). */
  long getRecordsRefused();

  /** Assignments that followed a plan of the sidecar's. */
  long getPlansFollowed();

  /** Assignments without a plan for their members (nobody moved, or the even spread). */
  long getFallbacks();

  /** Assignments that failed inside the assignor (every member kept its partitions). */
  long getFailures();

  /** Groups with a plan in hand. */
  int getGroupsWithPlans();
}
