package kafkaautoscaler.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
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
 */
public final class ExclusiveLocalLogStore extends HadoopFileSystemLogStore {

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
        try {
            try (FileChannel channel = FileChannel.open(
                    staged, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                OutputStream out = Channels.newOutputStream(channel);
                while (actions.hasNext()) {
                    out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
                }
                out.flush();
                channel.force(true);
            }
            if (overwrite) {
                Files.move(staged, target, StandardCopyOption.ATOMIC_MOVE);
            } else {
                Files.createLink(target, staged);  // EEXIST if another writer has it
            }
        } catch (FileAlreadyExistsException e) {
            throw new FileAlreadyExistsException(path.toString());
        } finally {
            Files.deleteIfExists(staged);
        }
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
}
