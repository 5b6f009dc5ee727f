package kafkaautoscaler.delta;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.UUID;
import kafkaautoscaler.fence.CommitClaims;
import kafkaautoscaler.fence.PartitionGates;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A Delta log store for tables on a local or shared POSIX filesystem written by several
 * processes at once.
 *
 * <p>Delta commits version N by creating N.json only if no other writer created it. Delta's
 * default store for such paths checks that the file is absent and then renames a temporary
 * file onto it; a local rename replaces an existing file, so two processes committing the
 * same version between their checks both succeed and the later file replaces the earlier:
 * a commit that returned successfully is lost. Within one JVM Delta holds a lock around the
 * commit; across processes nothing did.
 *
 * <p>This store writes the whole commit to a temporary file, then hard-links it to N.json:
 * link(2) fails when the name exists, atomically, so exactly one writer creates a version
 * and the others get {@link FileAlreadyExistsException} (Delta then retries at the next
 * version). Readers see a version file whole or not at all. Overwrites (Delta's
 * _last_checkpoint) are an atomic rename.
 *
 * <p>A commit of kafka-autoscaler's sink names, in its userMetadata, the claim token per
 * Kafka partition its rows were read under and the directory of those partitions' owner
 * files (consumer_sdk/lake/partition_fence.py). Such a commit is linked under those partitions'
 * gates and refused if another claim replaced one ({@link PartitionGates}).
 *
 * <p>Once a version is linked, the write waits (briefly, bounded) for the previous version's
 * checksum file ({@code N-1.crc}). Delta derives a commit's checksum from its read snapshot,
 * or, when concurrent commits came in between, from {@code N-1.crc}, which the previous
 * writer writes after its commit returns. A commit that follows another by a few
 * milliseconds would find it missing, and Delta then rebuilds the table's whole state in
 * Spark jobs (seconds on a small machine), which makes the next commit miss its predecessor's
 * checksum too. With Delta's own (slower) stores that rarely happened in the demo; with
 * this one, before it waited, often (benchmarks/results/demo_60s.md).
 */
public final class ExclusiveLocalLogStore extends HadoopFileSystemLogStore {

    private static final ObjectMapper JSON = new ObjectMapper();

    /** How long after the previous version was written its checksum is still awaited (ms). */
    public static final String CHECKSUM_WAIT_KEY = "kafkaautoscaler.delta.checksumWaitMs";
    static final long DEFAULT_CHECKSUM_WAIT_MS = 2000;

    public ExclusiveLocalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(
            Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        java.nio.file.Path target = localPath(path, hadoopConf);
        java.nio.file.Path staged = target.resolveSibling(
                "." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
        List<String> lines = new ArrayList<>();
        actions.forEachRemaining(lines::add);
        try {
            try (FileChannel channel = FileChannel.open(
                    staged, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                OutputStream out = Channels.newOutputStream(channel);
                for (String line : lines) {
                    out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
                }
                out.flush();
                channel.force(true);
            }
            if (overwrite) {
                Files.move(staged, target, StandardCopyOption.ATOMIC_MOVE);
            } else {
                try (PartitionGates gates = PartitionGates.take(claimsOf(lines))) {
                    Files.createLink(target, staged);  // EEXIST if another writer has it
                }
                PreviousChecksum.await(target, hadoopConf.getLong(
                        CHECKSUM_WAIT_KEY, DEFAULT_CHECKSUM_WAIT_MS));
            }
        } catch (FileAlreadyExistsException e) {
            throw new FileAlreadyExistsException(path.toString());
        } finally {
            Files.deleteIfExists(staged);
        }
    }

    /** The claims named by a Delta commit's userMetadata (none if it is not ours). */
    private static CommitClaims claimsOf(List<String> lines) {
        for (String line : lines) {
            if (!line.contains("\"commitInfo\"")) {
                continue;
            }
            try {
                JsonNode metadata = JSON.readTree(line).path("commitInfo").path("userMetadata");
                return metadata.isTextual()
                        ? CommitClaims.ofMetadata(metadata.asText()) : CommitClaims.NONE;
            } catch (JsonProcessingException e) {
                return CommitClaims.NONE;
            }
        }
        return CommitClaims.NONE;
    }

    /** True, as for Delta's HDFS store: Delta then also serialises commits within a JVM. */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return true;
    }

    private static java.nio.file.Path localPath(Path path, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        Path qualified = fs.makeQualified(path);
        if (!"file".equals(qualified.toUri().getScheme())) {
            throw new IOException(
                    "ExclusiveLocalLogStore writes local paths only (file:), not " + qualified);
        }
        return java.nio.file.Paths.get(qualified.toUri());
    }

    /** Waiting for the previous version's checksum, see the class comment. */
    static final class PreviousChecksum {
        private static final java.util.regex.Pattern VERSION_FILE =
                java.util.regex.Pattern.compile("(\\d{20})\\.json");
        private static final long POLL_MS = 2;

        /**
         * Returns once {@code N-1.crc} exists, or {@code N-1.json} is older than
         * {@code waitMs}, or checksums are not being written ({@code N-2.crc} absent), or
         * {@code target} is not a version file.
         */
        static void await(java.nio.file.Path target, long waitMs) throws IOException {
            java.util.regex.Matcher version =
                    VERSION_FILE.matcher(target.getFileName().toString());
            if (waitMs <= 0 || !version.matches()) {
                return;
            }
            long previous = Long.parseLong(version.group(1)) - 1;
            if (previous < 0) {
                return;
            }
            java.nio.file.Path checksum = sibling(target, previous, "crc");
            java.nio.file.Path commit = sibling(target, previous, "json");
            if (previous >= 1 && !Files.exists(sibling(target, previous - 1, "crc"))) {
                return;
            }
            while (!Files.exists(checksum)) {
                long writtenAt;
                try {
                    writtenAt = Files.getLastModifiedTime(commit).toMillis();
                } catch (NoSuchFileException e) {
                    return;
                }
                if (System.currentTimeMillis() - writtenAt >= waitMs) {
                    return;
                }
                try {
                    Thread.sleep(POLL_MS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }

        private static java.nio.file.Path sibling(
                java.nio.file.Path target, long version, String extension) {
            return target.resolveSibling(String.format("%020d.%s", version, extension));
        }
    }
}
