package dev.tpcomm.java;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/** Runs one body per rank, each on its own Java platform thread, as a Java application would. */
final class Ranks {
    private Ranks() {}

    interface Body<R> {
        R run(JavaCommunicator comm) throws Exception;
    }

    static <R> List<R> run(List<JavaCommunicator> comms, Body<R> body) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(comms.size());
        try {
            List<Future<R>> futures = new ArrayList<>();
            for (JavaCommunicator c : comms) futures.add(pool.submit(() -> body.run(c)));
            List<R> results = new ArrayList<>();
            for (Future<R> f : futures) {
                try {
                    results.add(f.get(60, TimeUnit.SECONDS));
                } catch (ExecutionException e) {
                    if (e.getCause() instanceof Exception cause) throw cause;
                    throw e;
                }
            }
            return results;
        } finally {
            pool.shutdownNow();
        }
    }

    static void closeAll(List<JavaCommunicator> comms) {
        for (JavaCommunicator c : comms) c.close();
    }
}
