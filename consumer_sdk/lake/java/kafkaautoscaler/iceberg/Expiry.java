package kafkaautoscaler.iceberg;

import java.util.HashSet;
import java.util.Set;

import org.apache.iceberg.ExpireSnapshots;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.spark.Spark3Util;
import org.apache.spark.sql.SparkSession;

/**
 * Expires the snapshots the sink chose (consumer_sdk/lake/iceberg/expiry.py), and only those:
 * Iceberg's age-based expiry is turned off for the call (every snapshot is younger than
 * the epoch), so a snapshot holding a partition's highest offset stays whatever its age. The
 * files only expired snapshots reached (their manifest lists, manifests, and data files a
 * compaction replaced) are deleted with them.
 */
public final class Expiry {
    private Expiry() {}

    /** Expires those of {@code snapshotIds} the table still has; returns how many. */
    public static int expire(SparkSession spark, String identifier, long[] snapshotIds)
            throws Exception {
        Table table = Spark3Util.loadIcebergTable(spark, identifier);
        table.refresh();
        Set<Long> present = new HashSet<>();
        for (Snapshot snapshot : table.snapshots()) {
            present.add(snapshot.snapshotId());
        }
        Snapshot current = table.currentSnapshot();
        ExpireSnapshots expire = table.expireSnapshots().expireOlderThan(0L).retainLast(1);
        int expired = 0;
        for (long id : snapshotIds) {
            if (present.contains(id) && (current == null || current.snapshotId() != id)) {
                expire.expireSnapshotId(id);
                expired++;
            }
        }
        if (expired > 0) {
            expire.commit();
        }
        return expired;
    }
}
