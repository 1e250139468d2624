package sluice.bench;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * Debezium's embedded engine, run by bench/tap_bench.py beside `sluice tap`.
 *
 * <p>Usage: {@code EmbeddedCapture <engine.properties> <out.jsonl> <topic suffix> <events>
 * <timeout s>}. Starts the engine with the properties (connector, offsets, schema history),
 * writes every change event whose destination ends with the suffix to the file as one line
 * (key, a tab, the value: Debezium's JSON), and stops once {@code events} of them are written
 * and flushed. Prints, on one line: {@code events=N first_ms=F last_ms=L}, F and L counted
 * from the engine's start (just before it is built) to the first and the last event written.
 * Exits 1 when the engine fails or the events do not all come within the timeout.
 */
public final class EmbeddedCapture {

    private EmbeddedCapture() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: EmbeddedCapture <engine.properties> <out.jsonl> "
                               + "<topic suffix> <events> <timeout s>");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = Files.newInputStream(Path.of(args[0]))) {
            props.load(in);
        }
        String suffix = args[2];
        long expected = Long.parseLong(args[3]);
        long timeoutS = Long.parseLong(args[4]);
        CountDownLatch done = new CountDownLatch(1);
        long[] seen = {0};
        long[] first = {0};
        long[] last = {0};
        String[] failure = {null};
        BufferedWriter out = Files.newBufferedWriter(Path.of(args[1]), StandardCharsets.UTF_8);

        long started = System.nanoTime();
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
            .using(props)
            .notifying((List<ChangeEvent<String, String>> records,
                        DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                synchronized (seen) {
                    try {
                        for (ChangeEvent<String, String> record : records) {
                            String value = record.value();
                            if (last[0] != 0) {
                                // done (the file may be closed): later events are not counted
                                committer.markProcessed(record);
                                continue;
                            }
                            if (value != null && record.destination().endsWith(suffix)) {
                                out.write(String.valueOf(record.key()));
                                out.write('\t');
                                out.write(value);
                                out.write('\n');
                                if (seen[0]++ == 0) {
                                    first[0] = System.nanoTime();
                                }
                            }
                            committer.markProcessed(record);
                        }
                        if (seen[0] >= expected && last[0] == 0) {
                            out.flush();
                            last[0] = System.nanoTime();
                            done.countDown();
                        }
                    } catch (IOException e) {
                        failure[0] = "cannot write " + args[1] + ": " + e;
                        done.countDown();
                    }
                }
                committer.markBatchFinished();
            })
            .using((boolean success, String message, Throwable error) -> {
                if (!success) {
                    failure[0] = "the engine stopped: " + message
                        + (error == null ? "" : " (" + error + ")");
                }
                done.countDown();
            })
            .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        boolean inTime = done.await(timeoutS, TimeUnit.SECONDS);
        long total;
        synchronized (seen) {
            total = seen[0];
            out.close();
        }
        engine.close();
        executor.shutdown();
        executor.awaitTermination(60, TimeUnit.SECONDS);
        if (failure[0] != null || !inTime || total < expected) {
            System.out.println("error: " + (failure[0] != null ? failure[0]
                : total + " of " + expected + " events within " + timeoutS + " s"));
            System.out.flush();
            System.exit(1);
        }
        System.out.printf("events=%d first_ms=%.1f last_ms=%.1f%n", total,
                          (first[0] - started) / 1e6, (last[0] - started) / 1e6);
        System.out.flush();
        System.exit(0);
    }
}
