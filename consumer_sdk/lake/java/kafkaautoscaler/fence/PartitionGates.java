package kafkaautoscaler.fence;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The gates of a commit's Kafka partitions, held from the claim check until the commit has
 * landed. A gate is a POSIX lock on {@code <fence>/<partition>.gate}, taken in partition
 * order. A new owner writes its claim and then takes and releases the same gates
 * (consumer_sdk/lake/partition_fence.py), so a commit of an earlier owner either landed before
 * the new owner reads the table or finds the new claim here and is refused: even when that
 * owner was killed and only this JVM (a Spark Connect server) still runs its commit.
 */
public final class PartitionGates implements AutoCloseable {
    // A JVM may not take one file's lock twice (FileLock), and threads of a Connect server
    // commit at once: a lock per gate within the JVM first. An entry lives while a thread
    // holds or waits for its lock (a count kept under the map's per-key atomicity), so a
    // long-lived server writing many tables keeps none it is not using.
    private static final ConcurrentHashMap<Path, JvmGate> IN_JVM = new ConcurrentHashMap<>();
    private final List<Path> inJvm = new ArrayList<>();
    private final List<FileChannel> channels = new ArrayList<>();

    private static final class JvmGate {
        final ReentrantLock lock = new ReentrantLock();
        int users;  // changed only inside IN_JVM.compute for this key
    }

    private PartitionGates() {}

    /** Partition gates this JVM holds or waits for: 0 between commits (tests read it). */
    public static int inUse() {
        return IN_JVM.size();
    }

    /**
     * Takes the gates of {@code claims}' partitions and checks each owner file still names
     * the claim; throws {@link ClaimReplacedException} (holding nothing) if one does not.
     */
    public static PartitionGates take(CommitClaims claims) throws IOException {
        PartitionGates held = new PartitionGates();
        try {
            for (Map.Entry<Integer, String> claim : claims.tokens().entrySet()) {
                Path gate = claims.fence().resolve(claim.getKey() + ".gate");
                lockInJvm(gate);
                held.inJvm.add(gate);
                FileChannel channel = FileChannel.open(
                        gate, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
                held.channels.add(channel);
                channel.lock();  // released when the channel closes
                String owner = ownerOf(claims.fence().resolve(claim.getKey() + ".owner"));
                if (!claim.getValue().equals(owner)) {
                    throw new ClaimReplacedException(claim.getKey());
                }
            }
            return held;
        } catch (IOException | RuntimeException e) {
            held.close();
            throw e;
        }
    }

    private static void lockInJvm(Path gate) {
        JvmGate entry = IN_JVM.compute(gate, (key, current) -> {
            JvmGate used = current == null ? new JvmGate() : current;
            used.users++;
            return used;
        });
        entry.lock.lock();
    }

    private static void unlockInJvm(Path gate) {
        IN_JVM.computeIfPresent(gate, (key, entry) -> {
            entry.lock.unlock();
            return --entry.users == 0 ? null : entry;
        });
    }

    private static String ownerOf(Path owner) throws IOException {
        try {
            return Files.readString(owner, StandardCharsets.UTF_8);
        } catch (NoSuchFileException e) {
            return "";
        }
    }

    @Override
    public void close() throws IOException {
        IOException failed = null;
        for (int i = channels.size() - 1; i >= 0; i--) {
            try {
                channels.get(i).close();
            } catch (IOException e) {
                failed = e;
            }
        }
        channels.clear();
        for (int i = inJvm.size() - 1; i >= 0; i--) {
            unlockInJvm(inJvm.get(i));
        }
        inJvm.clear();
        if (failed != null) {
            throw failed;
        }
    }

    /** A commit's rows were read under a claim another writer has replaced since. */
    public static final class ClaimReplacedException extends IOException {
        private static final long serialVersionUID = 1L;

        ClaimReplacedException(int partition) {
            super("kafka-autoscaler: Kafka partition " + partition
                    + " was claimed by another writer after this commit's rows were read;"
                    + " commit refused");
        }
    }
}
