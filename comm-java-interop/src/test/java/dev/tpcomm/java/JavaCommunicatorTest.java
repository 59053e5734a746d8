package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tpcomm.BackendUnavailableException;
import dev.tpcomm.CollectiveMismatchException;
import dev.tpcomm.CommConfig;
import dev.tpcomm.CommunicationException;
import dev.tpcomm.CommunicationTimeoutException;
import dev.tpcomm.Communicator;
import dev.tpcomm.CommunicatorAbortedException;
import dev.tpcomm.DType;
import dev.tpcomm.MessageInfo;
import dev.tpcomm.MonitoredBarrierException;
import dev.tpcomm.ReduceOp;
import dev.tpcomm.Tensor;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import kotlin.jvm.internal.StringCompanionObject;
import kotlinx.serialization.KSerializer;
import kotlinx.serialization.builtins.BuiltinSerializersKt;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(value = 60, unit = TimeUnit.SECONDS)
class JavaCommunicatorTest {
    private static final KSerializer<String> STRING = BuiltinSerializersKt.serializer(StringCompanionObject.INSTANCE);

    /**
     * The local backend notices a cancelled waiter within one watchdog period (at most 50 ms) and
     * then aborts the world; a rank arriving before that could still complete the collective.
     */
    static void awaitAbortNoticed() throws InterruptedException {
        Thread.sleep(500);
    }

    private static CommConfig timeout(Duration d) {
        return CommConfig.builder().timeout(d).build();
    }

    @Test
    void everyCollectiveThroughFutures() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(4);
        try {
            List<String> out = Ranks.run(world, comm -> {
                int r = comm.getRank();
                int n = comm.getWorldSize();
                Tensor sum = comm.allReduce(Tensor.of(new float[] {r, 1f})).get();
                assertArrayEquals(new float[] {6f, 4f}, sum.toFloatArray());
                assertArrayEquals(new float[] {3f}, comm.allReduce(Tensor.of(new float[] {r}), ReduceOp.Max).get().toFloatArray());
                assertArrayEquals(new float[] {20f}, comm.broadcast(Tensor.of(new float[] {r * 10f}), 2).get().toFloatArray());
                Tensor red = comm.reduce(Tensor.of(new float[] {1f}), 1).get();
                assertEquals(r == 1 ? 4f : 1f, red.toFloatArray()[0]);
                assertArrayEquals(new float[] {0f, 1f, 2f, 3f}, comm.allGather(Tensor.of(new float[] {r})).get().toFloatArray());
                Tensor into = Tensor.zeros(DType.Float32, 4);
                assertSame(into, comm.allGatherInto(into, Tensor.of(new float[] {r + 1f})).get());
                assertArrayEquals(new float[] {1f, 2f, 3f, 4f}, into.toFloatArray());
                Tensor rs = comm.reduceScatter(Tensor.of(new float[] {0f, 1f, 2f, 3f})).get();
                assertArrayEquals(new float[] {4f * r}, rs.toFloatArray());
                Tensor rsOut = Tensor.zeros(DType.Float32, 1);
                comm.reduceScatterInto(rsOut, Tensor.of(new float[] {1f, 1f, 1f, 1f}), ReduceOp.Sum, 0).get();
                assertArrayEquals(new float[] {4f}, rsOut.toFloatArray());
                Tensor g = comm.gather(Tensor.of(new float[] {r}), 3).get();
                if (r == 3) assertArrayEquals(new float[] {0f, 1f, 2f, 3f}, g.toFloatArray()); else assertNull(g);
                Tensor part = Tensor.zeros(DType.Float32, 1);
                assertNull(comm.scatter(part, r == 0 ? Tensor.of(new float[] {5f, 6f, 7f, 8f}) : null, 0).get());
                assertArrayEquals(new float[] {5f + r}, part.toFloatArray());
                Tensor a2a = comm.allToAll(Tensor.of(new float[] {r * 10f, r * 10f + 1, r * 10f + 2, r * 10f + 3})).get();
                assertArrayEquals(new float[] {r, 10f + r, 20f + r, 30f + r}, a2a.toFloatArray());
                // uneven collectives: rank r contributes r rows (rank 0 none)
                Tensor gv = comm.allGatherV(Tensor.of(new float[] {r, r, r}).narrow(0, 0, r), List.of(0, 1, 2, 3)).get();
                assertArrayEquals(new float[] {1f, 2f, 2f, 3f, 3f, 3f}, gv.toFloatArray());
                Tensor rsv = comm.reduceScatterVBlocking(Tensor.of(new float[] {1f, 2f, 3f}), List.of(2, 0, 1, 0));
                assertArrayEquals(r == 0 ? new float[] {4f, 8f} : r == 2 ? new float[] {12f} : new float[0], rsv.toFloatArray());
                // every rank sends one row to each rank with a higher rank, and none to the others
                List<Integer> inSplits = new java.util.ArrayList<>();
                List<Integer> outSplits = new java.util.ArrayList<>();
                for (int j = 0; j < n; j++) { inSplits.add(j > r ? 1 : 0); outSplits.add(j < r ? 1 : 0); }
                Tensor sent = Tensor.of(new float[] {r * 10f + 1, r * 10f + 2, r * 10f + 3}).narrow(0, 0, n - 1 - r);
                Tensor a2av = comm.allToAllV(sent, inSplits, outSplits).get();
                float[] expected = new float[r];
                for (int j = 0; j < r; j++) expected[j] = j * 10f + (r - j);
                assertArrayEquals(expected, a2av.toFloatArray());
                assertNull(comm.barrier().get());
                // point to point around a ring
                Tensor inbox = Tensor.zeros(DType.Float32, 1);
                CompletableFuture<MessageInfo> recv = comm.recv(inbox, (r + n - 1) % n, 7);
                comm.send(Tensor.of(new float[] {r}), (r + 1) % n, 7).get();
                MessageInfo info = recv.get();
                assertEquals((r + n - 1) % n, info.getSource());
                assertEquals(7, info.getTag());
                assertEquals(4L, info.getByteSize());
                assertEquals((float) ((r + n - 1) % n), inbox.toFloatArray()[0]);
                // sub-communicators
                JavaCommunicator half = comm.split(r % 2).get();
                assertEquals(2, half.getWorldSize());
                assertArrayEquals(new float[] {r % 2 == 0 ? 2f : 4f}, half.allReduce(Tensor.of(new float[] {r})).get().toFloatArray());
                JavaCommunicator pair = comm.group(List.of(3, 0)).get();
                if (r == 0 || r == 3) assertEquals(r == 3 ? 0 : 1, pair.getRank()); else assertNull(pair);
                List<String> names = comm.allGatherObject("rank" + r, STRING).get();
                assertEquals(List.of("rank0", "rank1", "rank2", "rank3"), names);
                assertEquals("hello", comm.broadcastObject(r == 1 ? "hello" : null, 1, STRING).get());
                List<Tensor> fused = comm.allReduceCoalesced(List.of(Tensor.of(new float[] {1f}), Tensor.of(new int[] {r}))).get();
                assertArrayEquals(new float[] {4f}, fused.get(0).toFloatArray());
                assertArrayEquals(new int[] {6}, fused.get(1).toIntArray());
                return "ok " + r;
            });
            assertEquals(List.of("ok 0", "ok 1", "ok 2", "ok 3"), out);
        } finally {
            Ranks.closeAll(world);
        }
    }

    /** ReduceOp.PreMulSum from Java: new ReduceOp.PreMulSum(factor), per-rank factors, futures and blocking twins. */
    @Test
    void preMulSumFromJava() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(4);
        try {
            List<String> out = Ranks.run(world, comm -> {
                int r = comm.getRank();
                int n = comm.getWorldSize();
                // gradient averaging in one pass: (1 + 2 + 3 + 4) / 4
                Tensor mean = comm.allReduce(Tensor.of(new float[] {r + 1f}), new ReduceOp.PreMulSum(1.0 / n)).get();
                assertArrayEquals(new float[] {2.5f}, mean.toFloatArray());
                // each rank its own factor: Σ (r + 1) * 2
                ReduceOp mine = new ReduceOp.PreMulSum(r + 1.0);
                assertArrayEquals(new float[] {20f}, comm.allReduceBlocking(Tensor.of(new float[] {2f}), mine).toFloatArray());
                Tensor input = Tensor.of(new float[] {1f, 1f, 1f, 1f});
                assertArrayEquals(new float[] {10f}, comm.reduceScatterBlocking(input, mine, 0).toFloatArray());
                assertArrayEquals(new float[] {1f, 1f, 1f, 1f}, input.toFloatArray());
                ReduceOp sum = ReduceOp.Sum;
                assertEquals("Sum", sum.getName());
                assertEquals("PreMulSum", mine.getName());
                // an integer tensor: the future fails with IllegalArgumentException, nothing thrown at call time
                CompletableFuture<Tensor> refused = comm.allReduce(Tensor.of(new int[] {r}), mine);
                ExecutionException e = assertThrows(ExecutionException.class, refused::get);
                assertInstanceOf(IllegalArgumentException.class, e.getCause());
                return "ok " + r;
            });
            assertEquals(List.of("ok 0", "ok 1", "ok 2", "ok 3"), out);
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void everyCollectiveBlocking() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(3);
        try {
            Ranks.run(world, comm -> {
                int r = comm.getRank();
                assertArrayEquals(new double[] {3.0}, comm.allReduceBlocking(Tensor.of(new double[] {1.0})).toDoubleArray());
                assertArrayEquals(new float[] {0f}, comm.allReduceBlocking(Tensor.of(new float[] {r}), ReduceOp.Min).toFloatArray());
                assertArrayEquals(new int[] {9}, comm.broadcastBlocking(Tensor.of(new int[] {r == 0 ? 9 : 0}), 0).toIntArray());
                assertEquals(r == 2 ? 3f : 1f, comm.reduceBlocking(Tensor.of(new float[] {1f}), 2).toFloatArray()[0]);
                assertArrayEquals(new float[] {0f, 1f, 2f}, comm.allGatherBlocking(Tensor.of(new float[] {r})).toFloatArray());
                Tensor out = Tensor.zeros(DType.Float32, 3);
                comm.allGatherIntoBlocking(out, Tensor.of(new float[] {r}));
                assertArrayEquals(new float[] {0f, 1f, 2f}, out.toFloatArray());
                assertArrayEquals(new float[] {3f * r}, comm.reduceScatterBlocking(Tensor.of(new float[] {0f, 1f, 2f})).toFloatArray());
                Tensor one = Tensor.zeros(DType.Float32, 1);
                comm.reduceScatterIntoBlocking(one, Tensor.of(new float[] {1f, 1f, 1f}), ReduceOp.Sum, 0);
                assertArrayEquals(new float[] {3f}, one.toFloatArray());
                Tensor g = comm.gatherBlocking(Tensor.of(new float[] {r}), 0);
                if (r == 0) assertArrayEquals(new float[] {0f, 1f, 2f}, g.toFloatArray()); else assertNull(g);
                comm.scatterBlocking(one, r == 1 ? Tensor.of(new float[] {4f, 5f, 6f}) : null, 1);
                assertArrayEquals(new float[] {4f + r}, one.toFloatArray());
                assertArrayEquals(new float[] {0f, 1f, 2f}, comm.allToAllBlocking(Tensor.of(new float[] {r, r, r})).toFloatArray());
                comm.barrierBlocking();
                if (r == 0) {
                    comm.sendBlocking(Tensor.of(new long[] {42L}), 1);
                } else if (r == 1) {
                    MessageInfo probed = comm.probeBlocking(Communicator.ANY_SOURCE, Communicator.ANY_TAG);
                    assertEquals(8L, probed.getByteSize());
                    Tensor in = Tensor.zeros(DType.Int64, 1);
                    assertEquals(0, comm.recvBlocking(in, Communicator.ANY_SOURCE).getSource());
                    assertEquals(42L, in.toLongArray()[0]);
                }
                JavaCommunicator sub = comm.splitBlocking(r == 2 ? null : 0);
                if (r == 2) assertNull(sub); else assertEquals(2, sub.getWorldSize());
                JavaCommunicator grp = comm.groupBlocking(List.of(1, 2));
                assertEquals(r == 0, grp == null);
                assertEquals(List.of("0", "1", "2"), comm.allGatherObjectBlocking(Integer.toString(r), STRING));
                assertEquals("x", comm.broadcastObjectBlocking(r == 0 ? "x" : null, 0, STRING));
                assertArrayEquals(new float[] {3f}, comm.allReduceCoalescedBlocking(List.of(Tensor.of(new float[] {1f}))).get(0).toFloatArray());
                return null;
            });
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void backToBackFuturesFromOneThreadKeepIssueOrder() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(3);
        try {
            Ranks.run(world, comm -> {
                int r = comm.getRank();
                List<CompletableFuture<Tensor>> futures = new ArrayList<>();
                for (int i = 0; i < 60; i++) {
                    // three different collectives interleaved: any reordering would be a mismatch
                    switch (i % 3) {
                        case 0 -> futures.add(comm.allReduce(Tensor.of(new float[] {i + r})));
                        case 1 -> futures.add(comm.broadcast(Tensor.of(new float[] {r == 1 ? i : -1f}), 1));
                        default -> futures.add(comm.allGather(Tensor.of(new float[] {i})));
                    }
                }
                for (int i = 0; i < 60; i++) {
                    float[] got = futures.get(i).join().toFloatArray();
                    switch (i % 3) {
                        case 0 -> assertArrayEquals(new float[] {3f * i + 3f}, got);
                        case 1 -> assertArrayEquals(new float[] {i}, got);
                        default -> assertArrayEquals(new float[] {i, i, i}, got);
                    }
                }
                return null;
            });
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void oneJavaThreadCanDriveEveryRankWithFutures() {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            CompletableFuture<Tensor> a = world.get(0).allReduce(Tensor.of(new float[] {1f}));
            assertFalse(a.isDone(), "rank 0 waits for rank 1, without blocking this thread");
            CompletableFuture<Tensor> b = world.get(1).allReduce(Tensor.of(new float[] {2f}));
            assertArrayEquals(new float[] {3f}, a.join().toFloatArray());
            assertArrayEquals(new float[] {3f}, b.join().toFloatArray());
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void badArgumentsCompleteTheFutureWithIllegalArgumentExceptionAndBlockingThrowsItUnwrapped() {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            JavaCommunicator c = world.get(0);
            Tensor t = Tensor.of(new float[] {1f});
            CompletableFuture<Tensor> f = c.broadcast(t, 5);
            assertTrue(f.isCompletedExceptionally());
            ExecutionException viaGet = assertThrows(ExecutionException.class, f::get);
            assertInstanceOf(IllegalArgumentException.class, viaGet.getCause());
            CompletionException viaJoin = assertThrows(CompletionException.class, f::join);
            assertInstanceOf(IllegalArgumentException.class, viaJoin.getCause());
            IllegalArgumentException direct = assertThrows(IllegalArgumentException.class, () -> c.broadcastBlocking(t, 5));
            assertTrue(direct.getMessage().contains("root 5 is out of range"), direct.getMessage());
            assertThrows(IllegalArgumentException.class, () -> c.allReduceBlocking(t, ReduceOp.BitwiseAnd));
            assertArrayEquals(new float[] {1f}, t.toFloatArray());
            // the communicator is still usable
            CompletableFuture<Tensor> ok = world.get(1).allReduce(Tensor.of(new float[] {2f}));
            assertArrayEquals(new float[] {3f}, c.allReduceBlocking(t).toFloatArray());
            ok.join();
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void aMissingRankTimesOutWithCommunicationTimeoutException() {
        List<JavaCommunicator> world = JavaComm.localWorld(2, timeout(Duration.ofMillis(300)));
        try {
            CompletableFuture<Tensor> f = world.get(0).allReduce(Tensor.of(new float[] {1f}));
            CompletionException e = assertThrows(CompletionException.class, f::join);
            CommunicationTimeoutException cause = assertInstanceOf(CommunicationTimeoutException.class, e.getCause());
            assertEquals(0, cause.getRank());
            assertEquals("local", cause.getBackend());
            assertTrue(cause.getOperation().contains("allReduce"), cause.getOperation());
            // the world is aborted: the late rank fails instead of hanging
            assertThrows(CommunicationException.class, () -> world.get(1).allReduceBlocking(Tensor.of(new float[] {1f})));
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void blockingTwinThrowsTheTimeoutItselfNotAWrapper() {
        List<JavaCommunicator> world = JavaComm.localWorld(2, timeout(Duration.ofMillis(200)));
        try {
            CommunicationTimeoutException e = assertThrows(CommunicationTimeoutException.class,
                () -> world.get(1).barrierBlocking());
            assertEquals(1, e.getRank());
            assertTrue(e.getSequenceNumber() >= 1);
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void cancellingAFutureCancelsTheCollectiveAndAbortsTheCommunicator() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            CompletableFuture<Tensor> f = world.get(0).allReduce(Tensor.of(new float[] {1f}));
            assertTrue(f.cancel(true));
            assertTrue(f.isCancelled());
            assertThrows(CancellationException.class, f::join);
            awaitAbortNoticed();
            assertThrows(CommunicationException.class, () -> world.get(1).allReduceBlocking(Tensor.of(new float[] {1f})));
            assertThrows(CommunicationException.class, () -> world.get(0).barrierBlocking());
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void getWithATimeoutThrowsTimeoutExceptionAndLeavesTheCollectiveRunning() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            CompletableFuture<Tensor> f = world.get(0).allReduce(Tensor.of(new float[] {1f}));
            assertThrows(TimeoutException.class, () -> f.get(50, TimeUnit.MILLISECONDS));
            assertFalse(f.isDone());
            world.get(1).allReduceBlocking(Tensor.of(new float[] {4f}));
            assertArrayEquals(new float[] {5f}, f.get(10, TimeUnit.SECONDS).toFloatArray());
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void orTimeoutOnAFutureCancelsTheCollective() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            CompletableFuture<Tensor> f = world.get(0).allReduce(Tensor.of(new float[] {1f})).orTimeout(100, TimeUnit.MILLISECONDS);
            CompletionException e = assertThrows(CompletionException.class, f::join);
            assertInstanceOf(TimeoutException.class, e.getCause());
            awaitAbortNoticed();
            assertThrows(CommunicationException.class, () -> world.get(1).allReduceBlocking(Tensor.of(new float[] {1f})));
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void mismatchedCollectivesFailOnEveryRankWithCommunicationExceptions() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            CompletableFuture<Tensor> a = world.get(0).allReduce(Tensor.of(new float[] {1f}));
            CompletableFuture<Tensor> b = world.get(1).broadcast(Tensor.of(new float[] {1f}), 0);
            Throwable ea = assertThrows(ExecutionException.class, a::get).getCause();
            Throwable eb = assertThrows(ExecutionException.class, b::get).getCause();
            assertInstanceOf(CommunicationException.class, ea);
            assertInstanceOf(CommunicationException.class, eb);
            assertTrue(ea instanceof CollectiveMismatchException || eb instanceof CollectiveMismatchException,
                "at least one rank names the mismatch: " + ea + " / " + eb);
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void interruptingABlockedThreadCancelsTheCallAndKeepsTheInterruptFlag() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            AtomicReference<Boolean> flag = new AtomicReference<>();
            CountDownLatch started = new CountDownLatch(1);
            Thread t = new Thread(() -> {
                started.countDown();
                try {
                    world.get(0).allReduceBlocking(Tensor.of(new float[] {1f}));
                } catch (Throwable e) {
                    thrown.set(e);
                }
                flag.set(Thread.currentThread().isInterrupted());
            });
            t.start();
            started.await();
            Thread.sleep(100);
            t.interrupt();
            t.join(10_000);
            assertInstanceOf(CommunicatorAbortedException.class, thrown.get());
            assertTrue(flag.get());
            assertThrows(CommunicationException.class, () -> world.get(1).allReduceBlocking(Tensor.of(new float[] {1f})));
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void aClosedCommunicatorFailsLaterCalls() {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        JavaCommunicator c = world.get(0);
        c.close();
        assertThrows(CommunicatorAbortedException.class, () -> c.barrierBlocking());
        CompletableFuture<Void> f = c.barrier();
        assertInstanceOf(CommunicatorAbortedException.class, assertThrows(CompletionException.class, f::join).getCause());
        Ranks.closeAll(world);
    }

    @Test
    void createAndWrapAndTheirErrors() throws Exception {
        JavaCommunicator single = JavaComm.create("local", CommConfig.builder().build());
        try {
            assertEquals(1, single.getWorldSize());
            assertEquals("local", single.getBackendName());
            assertArrayEquals(new float[] {2f}, single.allReduceBlocking(Tensor.of(new float[] {2f})).toFloatArray());
            JavaCommunicator again = JavaComm.wrap(single.unwrap());
            assertSame(single.unwrap(), again.unwrap());
            assertNotNull(again.toString());
        } finally {
            single.close();
        }
        BackendUnavailableException e = assertThrows(BackendUnavailableException.class,
            () -> JavaComm.create("no-such-backend", CommConfig.builder().build()));
        assertTrue(e.getMessage().contains("no-such-backend"), e.getMessage());
        CompletableFuture<JavaCommunicator> async = JavaComm.createAsync("no-such-backend", CommConfig.builder().build());
        assertInstanceOf(BackendUnavailableException.class, assertThrows(ExecutionException.class, async::get).getCause());
        assertThrows(IllegalArgumentException.class, () -> JavaComm.localWorld(0));
    }

    @Test
    void monitoredBarrierNamesTheMissingRank() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(4);
        try {
            // Every rank arrives: the future resolves to null, the blocking twin returns.
            Ranks.run(world, comm -> {
                assertNull(comm.monitoredBarrier(Duration.ofSeconds(5)).get());
                comm.monitoredBarrierBlocking(Duration.ofSeconds(5), true);
                ExecutionException bad = assertThrows(ExecutionException.class, () -> comm.monitoredBarrier(null).get());
                assertInstanceOf(IllegalArgumentException.class, bad.getCause());
                return null;
            });
            // Rank 2 stays away: rank 0's future fails naming it, and the ranks that arrived learn it from rank 0.
            List<Throwable> errors = Ranks.run(world, comm -> {
                if (comm.getRank() == 2) {
                    Thread.sleep(1500);
                    return null;
                }
                try {
                    comm.monitoredBarrierBlocking(Duration.ofMillis(500));
                    return null;
                } catch (MonitoredBarrierException e) {
                    return e;
                }
            });
            for (int r : new int[] {0, 1, 3}) {
                MonitoredBarrierException e = assertInstanceOf(MonitoredBarrierException.class, errors.get(r), "rank " + r);
                assertEquals(List.of(2), e.getMissingRanks());
            }
            assertTrue(errors.get(0).getMessage().contains("rank 2 did not reach monitoredBarrier within 500ms"), errors.get(0).getMessage());
        } finally {
            Ranks.closeAll(world);
        }
    }
}
