/*
 * The in-process all-reduce's reduction kernel alone, on two threads with fixed halves, as the C
 * roofline's allreduce4 runs (../shared/bench/peers/roofline.c: each of 2 threads reduces its slice
 * of 4 ranks' buffers into all 4, a barrier per call): what separates tpcomm's 1 MiB in-process
 * all-reduce from that C kernel, the kernel or the collective around it (issue 37, goal 3). Not
 * part of the build; a single-file program for the JDK's source launcher, on tpcomm's classpath (it
 * calls the internal Vector API kernel the in-process backend uses, as a public JVM method):
 *
 *   source scripts/env.sh; source scripts/run-module.sh; tpcomm_build comm-bench
 *   java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -cp "$TPCOMM_CP" \
 *       comm-bench/experiments/TwoThreadKernel.java [BYTES_PER_RANK] [CALLS]
 *
 * Each call: both threads pass a spinning barrier, each runs VectorKernels.float32 (Sum, 4 inputs,
 * 4 outputs, in place) on its half, both pass a second barrier. Prints the median and the range of
 * 7 repeats of CALLS calls (after 3 untimed repeats), µs per call. Default 1 MiB per rank, 2,000 calls.
 *
 * Measured on the 2-core VM (2026-11-29 07:08 UTC, 3 rounds alternating with the C roofline and
 * tpcomm's 1 MiB in-process all-reduce, scripts/bench.sh's program, load about 2):
 *   C allreduce4 41.8 / 43.6 / 43.9 µs; this kernel 48.5 / 47.8 / 51.1 µs (1.10-1.16x C);
 *   tpcomm's all-reduce 56.8 / 53.6 / 53.1 µs (1.04-1.17x this kernel).
 * So of the 1 MiB all-reduce's 1.2-1.3x C, about half is the Vector API kernel itself and half the
 * collective around it (the 4 ranks' rendezvous, the front, ParallelWork's claims). Three variants
 * of the loop in plain Java, 2 rounds (base 51.0-52.5, each row sliced to its half first so every
 * offset starts at 0: 49.1-51.9, unrolled by two vectors: 51.3-53.1, C 43.2-43.6 µs), did not
 * close the kernel's part; not kept.
 */
import dev.tpcomm.ReduceOp;
import dev.tpcomm.coroutines.local.VectorKernels;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicInteger;

public class TwoThreadKernel {
    static final AtomicInteger arrived = new AtomicInteger();

    /** A sense-free spinning barrier of 2: the phase-th arrival of each thread waits for the other's. */
    static void barrier(int phase) {
        arrived.incrementAndGet();
        while (arrived.get() < 2 * phase) Thread.onSpinWait();
    }

    public static void main(String[] a) throws Exception {
        long bytes = a.length > 0 ? Long.parseLong(a[0]) : 1L << 20;
        int calls = a.length > 1 ? Integer.parseInt(a[1]) : 2000;
        long count = bytes / 4;
        long half = (count / 2) & ~15L;
        Arena arena = Arena.ofShared();
        MemorySegment[] rows = new MemorySegment[4];
        for (int r = 0; r < 4; r++) {
            rows[r] = arena.allocate(bytes, 64);
            rows[r].fill((byte) 0);
        }
        int repeats = 10;
        int total = repeats * calls;
        Thread helper = new Thread(() -> {
            int phase = 0;
            for (int c = 0; c < total; c++) {
                barrier(++phase);
                VectorKernels.INSTANCE.float32(ReduceOp.Sum, 4, rows, half, rows, 4, half, count - half);
                barrier(++phase);
            }
        });
        helper.setDaemon(true);
        helper.start();
        double[] us = new double[repeats];
        int phase = 0;
        for (int rep = 0; rep < repeats; rep++) {
            long t0 = System.nanoTime();
            for (int c = 0; c < calls; c++) {
                barrier(++phase);
                VectorKernels.INSTANCE.float32(ReduceOp.Sum, 4, rows, 0L, rows, 4, 0L, half);
                barrier(++phase);
            }
            us[rep] = (System.nanoTime() - t0) / 1e3 / calls;
        }
        helper.join();
        double[] timed = Arrays.copyOfRange(us, 3, repeats);
        Arrays.sort(timed);
        System.out.printf("two-thread kernel, %d B per rank: median %.1f us (%.1f-%.1f) per call%n",
            bytes, timed[timed.length / 2], timed[0], timed[timed.length - 1]);
    }
}
