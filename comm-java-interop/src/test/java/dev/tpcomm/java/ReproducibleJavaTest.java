package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.tpcomm.CommConfig;
import dev.tpcomm.ReduceOp;
import dev.tpcomm.Tensor;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The reproducible reductions from Java: per call (reproducible()) and per communicator (the config's builder). */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ReproducibleJavaTest {
    // README-SNIPPET-BEGIN reproducible-java
    /** One rank of three: 1e8 + 1 - 1e8 in float32, whatever the order or the world size. */
    static float rank(JavaCommunicator comm) throws Exception {
        float[] inputs = {1e8f, 1f, -1e8f};
        Tensor x = Tensor.of(new float[] {inputs[comm.getRank()]});
        comm.reproducible().allReduceBlocking(x, ReduceOp.Sum);   // the correctly rounded exact sum
        return x.getFloat(0);                                     // 1.0 on every rank
    }
    // README-SNIPPET-END reproducible-java

    @Test
    void perCallTheExactSumOnEveryRank() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(3);
        try {
            for (float v : Ranks.run(world, ReproducibleJavaTest::rank)) assertEquals(1f, v);
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void perCommunicatorThroughTheBuilderAndAverageAsAFuture() throws Exception {
        CommConfig config = CommConfig.builder().worldSize(3).reproducibleReductions(true).build();
        List<JavaCommunicator> world = JavaComm.localWorld(3, config);
        try {
            List<Float> got = Ranks.run(world, comm -> {
                float[] inputs = {1e8f, 2f, -1e8f};
                Tensor x = Tensor.of(new float[] {inputs[comm.getRank()]});
                comm.allReduce(x, ReduceOp.Avg).get(30, TimeUnit.SECONDS);
                return x.getFloat(0);
            });
            for (float v : got) assertEquals(2f / 3f, v);
        } finally {
            Ranks.closeAll(world);
        }
    }
}
