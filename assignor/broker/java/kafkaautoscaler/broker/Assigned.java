package kafkaautoscaler.broker;

import java.util.Map;
import java.util.Set;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;

/** One member's partitions, by topic id, as the coordinator takes them. */
record Assigned(Map<Uuid, Set<Integer>> partitions) implements MemberAssignment {}
