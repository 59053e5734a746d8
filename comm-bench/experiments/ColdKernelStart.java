/*
 * What the in-process reduction kernels cost in a fresh JVM, call by call, before the JIT has
 * compiled them (issue 37: the first calls at a new size). Not part of the build; a single-file
 * program for the JDK's source launcher, on tpcomm's classpath (it calls the internal kernels the
 * in-process backend uses, as public JVM methods, to time them alone):
 *
 *   source scripts/env.sh; source scripts/run-module.sh; tpcomm_build comm-bench
 *   java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -cp "$TPCOMM_CP" \
 *       comm-bench/experiments/ColdKernelStart.java vector|scalar|mixed ELEMENTS CALLS [PREFIX]
 *
 * Each call reduces four native rows of ELEMENTS floats (Sum) into all four, as a 4-rank
 * all-reduce does: `vector` through the Vector API kernel (VectorKernels.float32), `scalar` through
 * the fallback (ReduceKernels.reduceScalar: copies into float arrays, plain loops), `mixed` the
 * vector kernel on the first PREFIX elements and the fallback on the rest (a "scalar until the vector
 * kernel is compiled" scheme). It prints the time of calls 1, 2, 3, 5, 10, 20, 50, ... in µs.
 *
 * Measured on the 2-core VM (2026-11-29 03:00 UTC, ELEMENTS 16384 = one rank's 64 KiB, 3000 calls):
 *   vector: c2 13,670  c3 6,669  c10 3,986  c20 1,367  c50 538  c100-c200 484-501  c500 5.7  c2000 5.7
 *   scalar: c2 3,639   c3 1,343  c10 1,311  c20 1,299  c50 163  c100-c200 120-128  c500 42.8 c1000 8.8
 *   mixed (PREFIX 512): c5 9,675  c100 258  c200 108  c500 81  c1000 26
 * Both run interpreted at about 20-80 ns per element for the first 10-20 calls; then the vector
 * kernel runs as C1 code, which does not intrinsify the Vector API (about 0.5 ms a call, 90x its
 * compiled speed), for a few hundred calls, where the fallback's C1 code is 4x faster; compiled, the
 * vector kernel is 1.5x faster than the fallback. Splitting a call between them is slower than
 * either (two kernels to compile). With 4 warmed-up ranks, `scripts/bench.sh --sizes 8,64K` shows the
 * same as its 64 KiB point's `first` column: 1.6-1.8 ms per call (first 5 or 50) against 6 µs.
 */
import dev.tpcomm.DType;
import dev.tpcomm.ReduceOp;
import dev.tpcomm.coroutines.local.ReduceKernels;
import dev.tpcomm.coroutines.local.VectorKernels;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

public class ColdKernelStart {
    public static void main(String[] a) {
        String mode = a[0];
        int count = Integer.parseInt(a[1]);
        int calls = Integer.parseInt(a[2]);
        int prefix = a.length > 3 ? Integer.parseInt(a[3]) : 0;
        Arena arena = Arena.ofShared();
        MemorySegment[] ins = new MemorySegment[4];
        for (int r = 0; r < 4; r++) {
            ins[r] = arena.allocate(count * 4L, 64);
            for (int i = 0; i < count; i++) ins[r].setAtIndex(ValueLayout.JAVA_FLOAT, i, r + i * 0.5f);
        }
        long[] t = new long[calls];
        for (int c = 0; c < calls; c++) {
            long t0 = System.nanoTime();
            switch (mode) {
                case "vector" -> VectorKernels.INSTANCE.float32(ReduceOp.Sum, 4, ins, 0L, ins, 4, 0L, count);
                case "scalar" -> ReduceKernels.INSTANCE.reduceScalar(DType.Float32, ReduceOp.Sum, 4, ins, 0L, ins, 4, 0L, count, null);
                case "mixed" -> {
                    VectorKernels.INSTANCE.float32(ReduceOp.Sum, 4, ins, 0L, ins, 4, 0L, prefix);
                    ReduceKernels.INSTANCE.reduceScalar(DType.Float32, ReduceOp.Sum, 4, ins, prefix, ins, 4, prefix, count - prefix, null);
                }
                default -> throw new IllegalArgumentException("mode is vector, scalar or mixed, got " + mode);
            }
            t[c] = System.nanoTime() - t0;
        }
        int[] marks = {0, 1, 2, 4, 9, 19, 49, 99, 199, 499, 999, 1999, 4999, 9999};
        StringBuilder sb = new StringBuilder(mode + " elements=" + count + " prefix=" + prefix + " (us):");
        for (int m : marks) if (m < calls) sb.append(String.format(" c%d=%.1f", m + 1, t[m] / 1e3));
        System.out.println(sb);
    }
}
