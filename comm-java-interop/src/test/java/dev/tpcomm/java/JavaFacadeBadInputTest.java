package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.tpcomm.CommConfig;
import dev.tpcomm.ReduceOp;
import dev.tpcomm.Tensor;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import kotlinx.serialization.KSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Issue 19, item 6 (held-out fault suite): the facade's KDoc promises "Futures never throw at call
 * time. Bad arguments complete the future exceptionally with IllegalArgumentException". A Java
 * caller passing null must get a failed future, not a NullPointerException from the call.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class JavaFacadeBadInputTest {

    /** Calls [call] and checks that it returned a future that fails with IllegalArgumentException naming [operation] and [parameter]. */
    private static void failsLater(String operation, String parameter, Supplier<CompletableFuture<?>> call) throws Exception {
        CompletableFuture<?> future;
        try {
            future = call.get();
        } catch (Throwable t) {
            fail(operation + "(null " + parameter + ") threw at call time instead of returning a failed future: " + t);
            return;
        }
        assertNotNull(future, operation + " returned null");
        ExecutionException e = assertThrows(ExecutionException.class, () -> future.get(10, TimeUnit.SECONDS), operation);
        IllegalArgumentException iae = assertInstanceOf(IllegalArgumentException.class, e.getCause(), operation + ": " + e.getCause());
        assertTrue(iae.getMessage().contains(operation + ": " + parameter + " is null"), operation + ": message was: " + iae.getMessage());
    }

    @Test
    @SuppressWarnings({"unchecked", "rawtypes"})
    void nullArgumentsCompleteTheFutureExceptionallyAndNeverThrow() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(1);
        JavaCommunicator comm = world.get(0);
        try {
            Tensor t = Tensor.of(new float[] {1f, 2f});
            failsLater("allReduce", "tensor", () -> comm.allReduce(null));
            failsLater("allReduce", "op", () -> comm.allReduce(t, null));
            failsLater("broadcast", "tensor", () -> comm.broadcast(null, 0));
            failsLater("reduce", "tensor", () -> comm.reduce(null, 0, ReduceOp.Max));
            failsLater("allGather", "input", () -> comm.allGather(null));
            failsLater("allGatherInto", "output", () -> comm.allGatherInto(null, t));
            failsLater("reduceScatter", "input", () -> comm.reduceScatter(null));
            failsLater("reduceScatterInto", "input", () -> comm.reduceScatterInto(t, null));
            failsLater("gather", "input", () -> comm.gather(null, 0));
            failsLater("scatter", "output", () -> comm.scatter(null, t, 0));
            failsLater("allToAll", "input", () -> comm.allToAll(null));
            failsLater("send", "tensor", () -> comm.send(null, 0));
            failsLater("recv", "tensor", () -> comm.recv(null, 0));
            failsLater("group", "ranks", () -> comm.group(null));
            failsLater("allGatherObject", "serializer", () -> comm.allGatherObject("x", (KSerializer<String>) null));
            failsLater("allGatherObject", "type", () -> comm.allGatherObject("x", (Class<String>) null));
            failsLater("allGatherObject", "codec", () -> comm.allGatherObject("x", (ObjectCodec<String>) null));
            failsLater("broadcastObject", "type", () -> comm.broadcastObject("x", 0, (Class<String>) null));
            failsLater("broadcastObject", "codec", () -> comm.broadcastObject("x", 0, (ObjectCodec<String>) null));
            failsLater("allReduceCoalesced", "tensors", () -> comm.allReduceCoalesced(null));
            failsLater("deviceMesh", "shape", () -> comm.deviceMesh(null, List.of("x")));
            failsLater("JavaComm.createAsync", "backend", () -> JavaComm.createAsync(null, CommConfig.builder().build()));
            failsLater("JavaComm.createAsync", "config", () -> JavaComm.createAsync("local", null));

            // The blocking twins throw the IllegalArgumentException itself.
            IllegalArgumentException blocking = assertThrows(IllegalArgumentException.class, () -> comm.allReduceBlocking(null));
            assertEquals("allReduce: tensor is null; pass a tensor", blocking.getMessage());

            // The communicator is still usable: bad arguments never reach it.
            assertArrayEquals(new float[] {1f, 2f}, comm.allReduce(t).get(10, TimeUnit.SECONDS).toFloatArray());
        } finally {
            Ranks.closeAll(world);
        }
    }
}
