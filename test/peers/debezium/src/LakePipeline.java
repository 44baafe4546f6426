import java.io.FileInputStream;
import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

/**
 * A CDC pipeline as a data team would run it: Debezium's SQL Server connector, embedded (file offsets and
 * file schema history, no Kafka), applying each batch to the lake stand-in (Lake) and, once it is durable,
 * reporting through the documentation's FinalizeProgress recipe, and only then marking the batch processed.
 *
 *   java -cp ... LakePipeline pipeline.properties
 *
 * Properties: every "debezium.*" key goes to the engine without its prefix; lake.dir; finalize.url,
 * finalize.table, finalize.consumer, finalize.database (FinalizeProgress's arguments); crash.after.apply = N
 * ends the process abruptly (halt, no shutdown) after the N-th durable apply that held streaming changes,
 * before its report, as a crash between the lake's commit and the report would;
 * broken.lake.loses.writes.after = N makes the lake drop every write from the N-th streaming batch on while
 * the reports go on (a broken pipeline, which the test's check must catch). SIGTERM, or the end of standard
 * input (the test that started it is gone), stops the engine
 * cleanly (offsets flushed). Prints "pipeline: applied N" per batch and "pipeline: stopped" at the end.
 */
public final class LakePipeline {
    /** Runs the pipeline until SIGTERM, a crash point or the engine's end. */
    public static void main(String[] args) throws Exception {
        Properties conf = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            conf.load(in);
        }
        Properties engineConf = new Properties();
        for (String k : conf.stringPropertyNames()) {
            if (k.startsWith("debezium.")) {
                engineConf.setProperty(k.substring("debezium.".length()), conf.getProperty(k));
            }
        }
        Lake lake = new Lake(Path.of(conf.getProperty("lake.dir")));
        FinalizeProgress progress = new FinalizeProgress(conf.getProperty("finalize.url"),
                conf.getProperty("finalize.table"), conf.getProperty("finalize.consumer"),
                conf.getProperty("finalize.database"));
        int[] crashAfter = { Integer.parseInt(conf.getProperty("crash.after.apply", "0")) };
        // A broken lake, for the test of the test: from the N-th streaming batch on, writes are lost
        // while the reports go on.
        int[] loseAfter = { Integer.parseInt(conf.getProperty("broken.lake.loses.writes.after", "0")) };
        boolean[] losing = { false };
        CountDownLatch done = new CountDownLatch(1);

        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(engineConf)
                .notifying((List<ChangeEvent<String, String>> batch,
                            DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                    try {
                        if (loseAfter[0] > 0 && hasStreaming(batch) && --loseAfter[0] == 0) {
                            losing[0] = true;
                            System.out.println("pipeline: the lake loses every write from here on");
                        }
                        int n = losing[0] ? 0 : lake.apply(batch);
                        if (n > 0) {
                            System.out.println("pipeline: applied " + n);
                        }
                        crashPoint(crashAfter, batch, "between apply and report");
                        progress.afterDurableApply(batch);
                    } catch (Exception e) {
                        throw new RuntimeException("the lake's apply failed", e);
                    }
                    for (ChangeEvent<String, String> r : batch) {
                        committer.markProcessed(r);
                    }
                    committer.markBatchFinished();
                })
                .using((success, message, error) -> {
                    System.out.println("pipeline: engine ended (" + (success ? "ok" : "failed") + "): " + message);
                    if (error != null) {
                        error.printStackTrace(System.out);
                    }
                    done.countDown();
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                engine.close();
                done.await(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                e.printStackTrace(System.out);
            }
            System.out.println("pipeline: stopped");
            System.out.flush();
        }));
        executor.execute(engine);
        Thread parent = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // nothing: wait for the end of standard input
                }
            } catch (java.io.IOException e) {
                // as the end
            }
            System.exit(0);                         // runs the shutdown hook: the engine closes
        });
        parent.setDaemon(true);
        parent.start();
        done.await();
        executor.shutdown();
    }

    /** Ends the process abruptly at the N-th batch holding streaming changes, when asked to. */
    private static void crashPoint(int[] crashAfter, List<ChangeEvent<String, String>> batch, String where) {
        if (crashAfter[0] > 0 && hasStreaming(batch) && --crashAfter[0] == 0) {
            System.out.println("pipeline: crashing " + where);
            System.out.flush();
            Runtime.getRuntime().halt(137);
        }
    }

    /** Does the batch hold a streaming change (not a snapshot record)? */
    private static boolean hasStreaming(List<ChangeEvent<String, String>> batch) {
        for (ChangeEvent<String, String> r : batch) {
            if (r.value() != null && r.value().contains("\"snapshot\":\"false\"")) {
                return true;
            }
        }
        return false;
    }
}
