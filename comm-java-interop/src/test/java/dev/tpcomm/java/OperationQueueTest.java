package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tpcomm.CommunicationException;
import dev.tpcomm.CommunicatorAbortedException;
import dev.tpcomm.ReduceOp;
import dev.tpcomm.Tensor;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(value = 60, unit = TimeUnit.SECONDS)
class OperationQueueTest {

    @Test
    void addAwaitAllAndInspect() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            List<Integer> pendingAfter = Ranks.run(world, comm -> {
                OperationQueue queue = new OperationQueue();
                List<Tensor> grads = new ArrayList<>();
                for (int i = 0; i < 5; i++) {
                    Tensor g = Tensor.of(new float[] {i});
                    grads.add(g);
                    assertEquals(i + 1L, queue.add(comm.allReduce(g)));
                }
                assertEquals(5, queue.size());
                queue.awaitAll();
                for (int i = 0; i < 5; i++) assertArrayEquals(new float[] {2f * i}, grads.get(i).toFloatArray());
                assertSame(grads.get(3), queue.get(3).join());
                assertEquals(4L, queue.operationId(3));
                return queue.pendingCount();
            });
            assertEquals(List.of(0, 0), pendingAfter);
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void timedAwaitAllReportsWhetherEverythingFinished() {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            OperationQueue queue = new OperationQueue();
            queue.add(world.get(0).allReduce(Tensor.of(new float[] {1f})));
            assertFalse(queue.awaitAll(Duration.ofMillis(50)), "rank 1 has not joined yet");
            assertEquals(1, queue.pendingCount());
            queue.add(world.get(1).allReduce(Tensor.of(new float[] {1f})));
            assertTrue(queue.awaitAll(Duration.ofSeconds(10)));
            assertEquals(0, queue.pendingCount());
            assertTrue(new OperationQueue().awaitAll(Duration.ofMillis(1)), "an empty queue has nothing pending");
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void awaitAnyReturnsTheIndexOfAFinishedOperationOrMinusOne() {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            OperationQueue queue = new OperationQueue();
            assertEquals(-1, queue.awaitAny(Duration.ofMillis(10)), "empty queue");
            queue.add(world.get(0).barrier());
            assertEquals(-1, queue.awaitAny(Duration.ofMillis(50)));
            queue.add(new CompletableFuture<>());   // never completes
            CompletableFuture<Void> other = world.get(1).barrier();
            assertEquals(0, queue.awaitAny(Duration.ofSeconds(10)));
            other.join();
            assertEquals(1, queue.clearCompleted());
            assertEquals(1, queue.size());
            assertEquals(-1, queue.awaitAny(Duration.ofMillis(20)));
            assertEquals(2L, queue.operationId(0), "ids never change; indices shift after clearCompleted");
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void clearCompletedDropsSucceededFailedAndCancelledOperations() {
        OperationQueue queue = new OperationQueue();
        queue.add(CompletableFuture.completedFuture("done"));
        queue.add(CompletableFuture.failedFuture(new IllegalStateException("failed")));
        CompletableFuture<Object> cancelled = new CompletableFuture<>();
        cancelled.cancel(true);
        queue.add(cancelled);
        queue.add(new CompletableFuture<>());
        assertEquals(4, queue.size());
        assertEquals(1, queue.pendingCount());
        assertEquals(3, queue.clearCompleted());
        assertEquals(1, queue.size());
        assertEquals(0, queue.clearCompleted());
    }

    @Test
    void cancelAllCancelsPendingCollectivesAndTheOtherRanksSeeTheAbort() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            OperationQueue queue = new OperationQueue();
            List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
            queue.addFailureListener((id, error) -> failures.add(error));
            queue.add(CompletableFuture.completedFuture(1));
            queue.add(world.get(0).allReduce(Tensor.of(new float[] {1f})));
            queue.add(world.get(0).allReduce(Tensor.of(new float[] {2f})));
            // Cancelling the first collective aborts the communicator at once (inside cancel), so the
            // second may already have failed with the named abort before cancelAll reaches it.
            int cancelled = queue.cancelAll();
            assertTrue(cancelled == 1 || cancelled == 2, "cancelled " + cancelled);
            assertEquals(0, queue.pendingCount());
            // A future completed by a worker thread may still be running its listeners.
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (failures.size() < 2 && System.nanoTime() < until) Thread.onSpinWait();
            assertEquals(2, failures.size());
            assertInstanceOf(CancellationException.class, failures.get(0));
            Throwable second = failures.get(1);
            assertTrue(second instanceof CancellationException || second instanceof CommunicatorAbortedException, second.toString());
            assertThrows(CancellationException.class, queue::awaitAll);
            JavaCommunicatorTest.awaitAbortNoticed();
            assertThrows(CommunicationException.class, () -> world.get(1).allReduceBlocking(Tensor.of(new float[] {1f})));
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void awaitAllThrowsTheFirstFailureUnwrapped() {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            OperationQueue queue = new OperationQueue();
            queue.add(CompletableFuture.completedFuture("fine"));
            queue.add(world.get(0).broadcast(Tensor.of(new float[] {1f}), 9));          // bad root
            queue.add(world.get(0).allReduce(Tensor.of(new float[] {1f}), ReduceOp.BitwiseOr)); // bad op
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, queue::awaitAll);
            assertTrue(e.getMessage().contains("root 9"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> queue.awaitAll(Duration.ofSeconds(1)));
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void awaitAllReturnsOnlyAfterTheListenersOfWhatItWaitedForRan() throws Exception {
        // Futures completed by another thread (as collectives are, by the ranks' threads), whose
        // listeners take a while: awaitAll, timed or not, must not return before they ran (it did:
        // it joined the futures themselves, which wake the waiter before the completing thread
        // has run the queue's listeners).
        for (boolean timed : new boolean[] {false, true}) {
            OperationQueue queue = new OperationQueue();
            List<Long> seen = Collections.synchronizedList(new ArrayList<>());
            CompletableFuture<Integer> ok = new CompletableFuture<>();
            CompletableFuture<Integer> bad = new CompletableFuture<>();
            queue.addCompletionListener((id, result) -> { sleep(300); seen.add(id); });
            queue.addFailureListener((id, error) -> { sleep(300); seen.add(id); });
            long okId = queue.add(ok);
            long badId = queue.add(bad);
            Thread completer = new Thread(() -> { ok.complete(1); bad.completeExceptionally(new IllegalStateException("failed")); });
            completer.start();
            IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> { if (timed) queue.awaitAll(Duration.ofSeconds(10)); else queue.awaitAll(); });
            assertEquals("failed", e.getMessage());
            assertEquals(List.of(okId, badId), new ArrayList<>(seen), "timed " + timed);
            completer.join();
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Test
    void communicationFailuresReachAwaitAllAndListenersAsThemselves() {
        List<JavaCommunicator> world = JavaComm.localWorld(2,
            dev.tpcomm.CommConfig.builder().timeout(Duration.ofMillis(200)).build());
        try {
            OperationQueue queue = new OperationQueue();
            List<Throwable> seen = Collections.synchronizedList(new ArrayList<>());
            long id = queue.add(world.get(0).allReduce(Tensor.of(new float[] {1f})));
            queue.addFailureListener(id, (opId, error) -> seen.add(error));
            CommunicationException e = assertThrows(CommunicationException.class, () -> queue.awaitAll(Duration.ofSeconds(10)));
            assertInstanceOf(dev.tpcomm.CommunicationTimeoutException.class, e);
            assertEquals(1, seen.size());
            assertSame(e, seen.get(0));
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void listenersSeeCollectivesFromRankThreads() throws Exception {
        List<JavaCommunicator> world = JavaComm.localWorld(2);
        try {
            OperationQueue queue = new OperationQueue();
            Map<Long, Object> completed = new ConcurrentHashMap<>();
            Map<Long, Throwable> failed = new ConcurrentHashMap<>();
            queue.addCompletionListener(completed::put);
            queue.addFailureListener(failed::put);
            CountDownLatch rank0Done = new CountDownLatch(1);

            Tensor t0 = Tensor.of(new float[] {1f});
            long id0 = queue.add(world.get(0).allReduce(t0));
            queue.addCompletionListener(id0, (id, result) -> rank0Done.countDown());
            long bad = queue.add(world.get(0).broadcast(t0, -1));
            assertEquals(List.of(bad), List.copyOf(failed.keySet()), "argument errors fail at once");
            assertInstanceOf(IllegalArgumentException.class, failed.get(bad));
            assertEquals(1L, rank0Done.getCount());
            long id1 = queue.add(world.get(1).allReduce(Tensor.of(new float[] {2f})));
            assertTrue(rank0Done.await(10, TimeUnit.SECONDS));
            assertThrows(IllegalArgumentException.class, () -> queue.awaitAll(Duration.ofSeconds(10)));
            // id0 completes on a worker thread, which runs its own listener (rank0Done) before the
            // queue-wide ones: the latter may still be running here.
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (completed.size() < 2 && System.nanoTime() < until) Thread.onSpinWait();
            assertEquals(2, completed.size());
            assertSame(t0, completed.get(id0));
            assertArrayEquals(new float[] {3f}, ((Tensor) completed.get(id1)).toFloatArray());
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void listenerBookkeeping() {
        OperationQueue queue = new OperationQueue();
        Map<Long, Object> completed = new ConcurrentHashMap<>();
        Map<Long, Throwable> failed = new ConcurrentHashMap<>();
        CompletionListener onDone = completed::put;
        FailureListener onFail = failed::put;
        queue.addCompletionListener(onDone);
        queue.addFailureListener(onFail);
        queue.addCompletionListener((id, result) -> { throw new IllegalStateException("a buggy listener"); });

        CompletableFuture<String> a = new CompletableFuture<>();
        CompletableFuture<String> b = new CompletableFuture<>();
        long idA = queue.add(a);
        long idB = queue.add(b);
        List<String> perId = Collections.synchronizedList(new ArrayList<>());
        queue.addCompletionListener(idA, (id, result) -> perId.add("A done " + result));
        queue.addFailureListener(idB, (id, error) -> perId.add("B failed " + error.getMessage()));
        a.complete("x");
        b.completeExceptionally(new java.util.concurrent.CompletionException(new IllegalStateException("boom")));
        assertEquals(Map.of(idA, "x"), completed);
        assertEquals(1, failed.size());
        assertInstanceOf(IllegalStateException.class, failed.get(idB), "CompletionException wrappers are removed");
        assertEquals(List.of("A done x", "B failed boom"), perId);

        // registered after the fact: called at once, in this thread
        queue.addCompletionListener(idA, (id, result) -> perId.add("late " + id));
        queue.addFailureListener(idA, (id, error) -> perId.add("never"));
        assertEquals("late " + idA, perId.get(2));
        assertEquals(3, perId.size());

        assertTrue(queue.removeCompletionListener(onDone));
        assertFalse(queue.removeCompletionListener(onDone));
        assertTrue(queue.removeFailureListener(onFail));
        queue.add(CompletableFuture.completedFuture("later"));
        assertEquals(1, completed.size(), "a removed listener is not called");

        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> queue.addCompletionListener(99L, (id, r) -> {}));
        assertTrue(e.getMessage().contains("no operation with id 99"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> queue.get(7));
    }
}
