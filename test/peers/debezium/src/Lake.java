import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.List;

import io.debezium.engine.ChangeEvent;

/**
 * The lake stand-in: each applied batch becomes one file of change events (one JSON value per line),
 * written to a temporary name, fsynced, renamed into place and the directory fsynced, so that a batch is
 * in the lake entirely or not at all once apply() returns. Files are numbered on from the greatest one
 * already there, across restarts. The test folds the files into the table the lake holds, ignoring an
 * event it already has (Debezium replays from its offsets after a crash: at least once).
 */
final class Lake {
    private final Path dir;
    private long next;

    /** A lake in a directory (created if missing), numbering on from what it holds. */
    Lake(Path dir) throws IOException {
        this.dir = Files.createDirectories(dir);
        long max = 0;
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, "batch-*.jsonl")) {
            for (Path f : files) {
                String n = f.getFileName().toString();
                max = Math.max(max, Long.parseLong(n.substring(6, n.length() - 6)));
            }
        }
        next = max + 1;
    }

    /** Writes the data change events of a batch durably; returns how many it wrote (0: nothing written). */
    int apply(List<ChangeEvent<String, String>> batch) throws IOException {
        StringBuilder lines = new StringBuilder();
        int n = 0;
        for (ChangeEvent<String, String> r : batch) {
            // Data topics are <prefix>.<db>.<schema>.<table>; schema changes and heartbeats are not data.
            if (r.value() == null || r.destination().split("\\.").length != 4) {
                continue;
            }
            lines.append(r.value().replace('\n', ' ')).append('\n');
            n++;
        }
        if (n == 0) {
            return 0;
        }
        Path tmp = dir.resolve(".incoming");
        Files.write(tmp, lines.toString().getBytes(StandardCharsets.UTF_8));
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.WRITE)) {
            ch.force(true);
        }
        Files.move(tmp, dir.resolve(String.format("batch-%08d.jsonl", next++)), StandardCopyOption.ATOMIC_MOVE);
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true);
        }
        return n;
    }
}
