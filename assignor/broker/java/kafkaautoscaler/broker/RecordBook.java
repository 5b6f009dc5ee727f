package kafkaautoscaler.broker;

/** Where a {@link PlanReader} hands the records of the topic it reads. */
interface RecordBook {
  /** Reads one record; never throws (a bad record is counted and logged once). */
  void offer(byte[] key, byte[] value, String where, long nowMs);

  /** Logs a warning the first time {@code reason} happens, never again after. */
  void warnOnce(String reason, String format, Object... arguments);
}
