package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tpcomm.CommunicationTimeoutException;
import dev.tpcomm.DType;
import dev.tpcomm.Tensor;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(value = 60, unit = TimeUnit.SECONDS)
class OverlapExampleTest {
    // README-SNIPPET-BEGIN overlap-java
    /** Stands for the backward pass of one layer: writes that layer's gradient. */
    static void backward(int layer, int rank, Tensor grad) {
        grad.fill(rank + layer);
    }

    /** One training step on one rank: each layer's all-reduce overlaps the next layer's backward. */
    static List<Tensor> trainStep(JavaCommunicator comm, int layers) {
        OperationQueue queue = new OperationQueue();
        queue.addFailureListener((id, error) -> System.err.println("all-reduce " + id + " failed: " + error));
        List<Tensor> grads = new ArrayList<>();
        for (int layer = 0; layer < layers; layer++) {
            Tensor grad = Tensor.zeros(DType.Float32, 1024);
            backward(layer, comm.getRank(), grad);
            grads.add(grad);
            queue.add(comm.allReduce(grad));      // issued now, in call order; returns at once
        }
        if (!queue.awaitAll(Duration.ofSeconds(30))) {   // throws the first failure itself, if any
            queue.cancelAll();                             // aborts the communicator on every rank
            throw new CommunicationTimeoutException("step timed out", comm.getRank(),
                comm.getBackendName(), "trainStep", -1, null, null);
        }
        return grads;
    }

    public static void main(String[] args) throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        ExecutorService threads = Executors.newFixedThreadPool(world.size());
        try {
            List<Future<List<Tensor>>> ranks = new ArrayList<>();
            for (JavaCommunicator comm : world) ranks.add(threads.submit(() -> trainStep(comm, 4)));
            for (Future<List<Tensor>> rank : ranks) {
                System.out.println("layer 3 gradient: " + rank.get().get(3).getFloat(0));  // (0+3) + (1+3) = 7
            }
        } finally {
            threads.shutdown();
            for (JavaCommunicator comm : world) comm.close();
        }
    }
    // README-SNIPPET-END overlap-java

    @Test
    void theReadmeJavaExampleRuns() throws Exception {
        main(new String[0]);
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            List<List<Tensor>> out = Ranks.run(world, comm -> trainStep(comm, 4));
            for (List<Tensor> grads : out) {
                for (int layer = 0; layer < 4; layer++) {
                    assertArrayEquals(new float[] {2f * layer + 1f}, new float[] {grads.get(layer).getFloat(0)});
                }
            }
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void docsOverlapMdHoldsExactlyTheCodeCompiledHere() throws Exception {
        String source = Files.readString(Path.of("src/test/java/dev/tpcomm/java/OverlapExampleTest.java"));
        String begin = "// README-SNIPPET-BEGIN overlap-java\n";
        String body = source.substring(source.indexOf(begin) + begin.length(), source.indexOf("    // README-SNIPPET-END overlap-java"));
        String unindented = body.lines().map(l -> l.startsWith("    ") ? l.substring(4) : l).reduce("", (a, l) -> a + l + "\n");
        assertTrue(unindented.length() > 500 && unindented.contains("queue.add(comm.allReduce(grad))"), "snippet found");
        String doc = Files.readString(Path.of("../docs/overlap.md"));
        assertTrue(doc.contains(unindented), "docs/overlap.md must contain the snippet of OverlapExampleTest.java verbatim (unindented by 4)");
    }
}
