package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tpcomm.Tensor;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(value = 60, unit = TimeUnit.SECONDS)
class JavaDeviceMeshTest {
    @Test
    void dpByTpMeshFromJavaThreads() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(4);
        try {
            Ranks.run(world, comm -> {
                int r = comm.getRank();
                try (JavaDeviceMesh mesh = comm.deviceMeshBlocking(List.of(2, 2), List.of("dp", "tp"))) {
                    assertEquals(List.of(r / 2, r % 2), mesh.getCoordinates());
                    assertEquals(List.of(r / 2 * 2, r / 2 * 2 + 1), mesh.ranksAlong("tp"));
                    assertEquals(r % 2, mesh.get("tp").getRank());
                    assertEquals(2, mesh.size("dp"));
                    float tp = mesh.get("tp").allReduceBlocking(Tensor.of(new float[] {r})).getFloat(0);
                    float dp = mesh.get("dp").allReduce(Tensor.of(new float[] {r})).get().getFloat(0);
                    assertEquals(r < 2 ? 1f : 5f, tp);
                    assertEquals(r % 2 == 0 ? 2f : 4f, dp);
                }
                return null;
            });
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void badMeshArgumentsAndUnknownNames() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            CompletableFuture<JavaDeviceMesh> bad = world.get(0).deviceMesh(List.of(3), List.of("dp"));
            IllegalArgumentException e = assertInstanceOf(IllegalArgumentException.class,
                assertThrows(ExecutionException.class, bad::get).getCause());
            assertTrue(e.getMessage().contains("shape [3] holds 3 ranks but the communicator has 2"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> world.get(0).deviceMeshBlocking(List.of(2), List.of("a", "b")));
            List<String> ok = Ranks.run(world, comm -> {
                try (JavaDeviceMesh mesh = comm.deviceMeshBlocking(List.of(2), List.of("dp"))) {
                    IllegalArgumentException unknown = assertThrows(IllegalArgumentException.class, () -> mesh.get("tp"));
                    assertArrayEquals(new float[] {1f}, mesh.get("dp").allReduceBlocking(Tensor.of(new float[] {comm.getRank()})).toFloatArray());
                    return unknown.getMessage();
                }
            });
            assertTrue(ok.get(0).contains("the dimensions are [dp]"), ok.get(0));
        } finally {
            Ranks.closeAll(world);
        }
    }
}
