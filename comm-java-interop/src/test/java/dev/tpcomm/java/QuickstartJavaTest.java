package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tpcomm.Tensor;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The README's Java example, compiled and run here; the README must hold it verbatim (unindented by 4). */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class QuickstartJavaTest {
    // README-SNIPPET-BEGIN quickstart-java
    /** One rank: an all-reduce as a future, then one that blocks, in the same order on every rank. */
    static float rank(JavaCommunicator comm) throws Exception {
        Tensor x = Tensor.of(new float[] {comm.getRank(), 1f});
        CompletableFuture<Tensor> pending = comm.allReduce(x);        // issued now; returns at once
        pending.get(30, TimeUnit.SECONDS);                            // in place: [0+1+2+3, 4] on every rank
        Tensor ones = comm.allReduceBlocking(Tensor.of(new float[] {1f}));   // [4]
        return x.getFloat(0) + ones.getFloat(0);                      // 10 on every rank
    }

    public static void main(String[] args) throws Exception {
        // Four ranks as threads of this JVM. Under mpirun: JavaComm.create("mpi"), one rank per process.
        List<JavaCommunicator> world = JavaComm.localWorld(4);
        ExecutorService threads = Executors.newFixedThreadPool(world.size());
        try {
            List<Future<Float>> ranks = new ArrayList<>();
            for (JavaCommunicator comm : world) ranks.add(threads.submit(() -> rank(comm)));
            for (Future<Float> r : ranks) System.out.println(r.get());   // 10.0, four times
        } finally {
            threads.shutdown();
            for (JavaCommunicator comm : world) comm.close();
        }
    }
    // README-SNIPPET-END quickstart-java

    @Test
    void theReadmeJavaExampleRunsAndComputesTenOnEveryRank() throws Exception {
        main(new String[0]);
        List<JavaCommunicator> world = JavaComm.localWorld(4);
        try {
            for (float v : Ranks.run(world, QuickstartJavaTest::rank)) assertEquals(10f, v);
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void readmeHoldsExactlyTheCodeCompiledHere() throws Exception {
        String source = Files.readString(Path.of("src/test/java/dev/tpcomm/java/QuickstartJavaTest.java"));
        String begin = "// README-SNIPPET-BEGIN quickstart-java\n";
        String body = source.substring(source.indexOf(begin) + begin.length(), source.indexOf("    // README-SNIPPET-END quickstart-java"));
        String unindented = body.lines().map(l -> l.startsWith("    ") ? l.substring(4) : l).reduce("", (a, l) -> a + l + "\n");
        assertTrue(unindented.contains("comm.allReduce(x)"), "snippet found");
        String readme = Files.readString(Path.of("../README.md"));
        assertTrue(readme.contains("```java\n" + unindented + "```\n"), "README.md must contain the snippet of QuickstartJavaTest.java verbatim (unindented by 4)");
    }
}
