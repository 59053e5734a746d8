package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tpcomm.DType;
import dev.tpcomm.ReduceOp;
import dev.tpcomm.Tensor;
import dev.tpcomm.coroutines.GradientBucket;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A Java training step with a persistent gradient bucket: gradients written into its views, one all-reduce per bucket. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class GradientBucketJavaTest {
    @Test
    void gradientsWrittenIntoTheViewsAreAveragedByOneCollective() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            Ranks.run(world, comm -> {
                int r = comm.getRank();
                try (GradientBucket bucket = new GradientBucket(DType.Float32, List.of(List.of(2), List.of(1, 3)))) {
                    List<Tensor> grads = bucket.getTensors();
                    for (int step = 0; step < 3; step++) {
                        bucket.zero();
                        grads.get(0).fill(r + step);       // the framework computes into the views
                        grads.get(1).fill(10.0 * r);
                        assertSame(bucket, comm.allReduceBucket(bucket, ReduceOp.Avg).get());
                        assertArrayEquals(new float[] {0.5f + step, 0.5f + step}, grads.get(0).toFloatArray());
                        assertArrayEquals(new float[] {5f, 5f, 5f}, grads.get(1).toFloatArray());
                    }
                    assertSame(bucket, comm.allReduceBucketBlocking(bucket));
                    assertArrayEquals(new float[] {10f, 10f, 10f}, grads.get(1).toFloatArray());
                }
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> comm.allReduceBucketBlocking(null));
                assertTrue(e.getMessage().contains("bucket"), e.getMessage());
                return null;
            });
        } finally {
            for (JavaCommunicator c : world) c.close();
        }
    }
}
