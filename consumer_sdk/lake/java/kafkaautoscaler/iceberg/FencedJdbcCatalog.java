package kafkaautoscaler.iceberg;

import java.io.IOException;
import java.io.UncheckedIOException;
import kafkaautoscaler.fence.CommitClaims;
import kafkaautoscaler.fence.PartitionGates;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;
import org.apache.iceberg.jdbc.JdbcCatalog;

/**
 * Iceberg's JDBC catalog, whose commits check kafka-autoscaler's partition claims.
 *
 * <p>A commit of kafka-autoscaler's sink names, in its snapshot summary
 * ({@value #SUMMARY_KEY}), the claim token per Kafka partition its rows were read under and
 * the directory of those partitions' owner files. Such a commit swaps the table's metadata
 * pointer under those partitions' gates, and is refused if another writer claimed one of
 * them since ({@link PartitionGates}): a writer killed with -9 whose commit a Spark Connect
 * server still runs cannot land rows the partitions' new owner has read past.
 */
public class FencedJdbcCatalog extends JdbcCatalog {
    /** The snapshot summary key of the sink's commit metadata (consumer_sdk/lake/commit_offsets.py). */
    public static final String SUMMARY_KEY = "kafka-autoscaler.offsets";

    @Override
    protected TableOperations newTableOps(TableIdentifier identifier) {
        return new FencedTableOperations(super.newTableOps(identifier));
    }

    /** The claims named by the snapshots {@code metadata} adds to {@code base}. */
    static CommitClaims claimsOf(TableMetadata base, TableMetadata metadata) {
        CommitClaims claims = CommitClaims.NONE;
        for (Snapshot snapshot : metadata.snapshots()) {
            boolean added = base == null || base.snapshot(snapshot.snapshotId()) == null;
            if (added && snapshot.summary() != null) {
                claims = claims.and(CommitClaims.ofMetadata(snapshot.summary().get(SUMMARY_KEY)));
            }
        }
        return claims;
    }

    /** The catalog's own operations, with the claim check around each commit. */
    static final class FencedTableOperations implements TableOperations {
        private final TableOperations delegate;

        FencedTableOperations(TableOperations delegate) {
            this.delegate = delegate;
        }

        @Override
        public void commit(TableMetadata base, TableMetadata metadata) {
            PartitionGates gates;
            try {
                gates = PartitionGates.take(claimsOf(base, metadata));
            } catch (PartitionGates.ClaimReplacedException e) {
                // Not a CommitFailedException: a retry cannot help; Iceberg cleans up.
                throw new ValidationException(e, "%s", e.getMessage());
            } catch (IOException e) {
                throw new UncheckedIOException(e);  // nothing committed
            }
            try {
                delegate.commit(base, metadata);
            } finally {
                try {
                    gates.close();
                } catch (IOException e) {
                    // Closing a gate's channel releases its lock whatever close reports; the
                    // commit's outcome is the delegate's.
                }
            }
        }

        @Override
        public TableMetadata current() {
            return delegate.current();
        }

        @Override
        public TableMetadata refresh() {
            return delegate.refresh();
        }

        @Override
        public FileIO io() {
            return delegate.io();
        }

        @Override
        public EncryptionManager encryption() {
            return delegate.encryption();
        }

        @Override
        public String metadataFileLocation(String fileName) {
            return delegate.metadataFileLocation(fileName);
        }

        @Override
        public LocationProvider locationProvider() {
            return delegate.locationProvider();
        }

        @Override
        public TableOperations temp(TableMetadata uncommittedMetadata) {
            return delegate.temp(uncommittedMetadata);
        }

        @Override
        public long newSnapshotId() {
            return delegate.newSnapshotId();
        }

        @Override
        public boolean requireStrictCleanup() {
            return delegate.requireStrictCleanup();
        }
    }
}
