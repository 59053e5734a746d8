/*
 * Does other Vector API code in the same JVM slow the default float32 reduction kernel? (issues 36, 37)
 *
 * A single-file program for the JDK's source launcher, no build needed:
 *
 *   java --add-modules jdk.incubator.vector [-XX:TypeProfileLevel=222] \
 *       comm-bench/experiments/VectorProfileInterference.java [elements] [case]
 *
 * It times `sum` (the shape of VectorKernels' float32 Avg: preferred-species loads, add, scale,
 * store to every row, in place over four native rows of `elements` floats, default 65536 = 256 KiB)
 * eight times (each the best of 200 calls), then runs `case` once, then times it eight times again:
 *   none   nothing (the control; this machine also shows a bimodal 107/150 µs at 65536 from run to run);
 *   exact  300 calls of `exact`, a register-resident exact-sum kernel (half-width float loads widened
 *          to double, sums, magnitudes and the smallest value's bits per group, two certificates):
 *          the kernel tried for issue 36 on 2026-11-28 and reverted;
 *   heap   one float vector load from a heap segment (MemorySegment.ofArray).
 * Measured with this file on the 2-core VM (2026-11-29 00:45-00:50 UTC, elements 65536): after
 * `exact` the default kernel's best-of-200 went from 99-101 µs to 117-118 µs (some lines 146-170,
 * the machine's other mode) in 3 runs of 3; the control `none` stays at 100 (and 157) µs; after
 * `heap` 111-113 against 101. With -XX:TypeProfileLevel=222 one run stayed at 100 µs and one read
 * 140-202, so per-call-site profiles are a lead, not an answer. Loading 128-bit float or 256-bit int
 * vectors, or float-to-double conversions, one at a time in a loop, did not reproduce it.
 */
import jdk.incubator.vector.*;
import java.lang.foreign.*;
import java.nio.ByteOrder;

public class VectorProfileInterference {
    static final VectorSpecies<Float> F = FloatVector.SPECIES_PREFERRED;
    static final VectorSpecies<Double> D = DoubleVector.SPECIES_PREFERRED;
    static final VectorSpecies<Float> H = VectorSpecies.of(float.class, VectorShape.forBitSize(F.vectorBitSize() / 2));
    static final ByteOrder ORDER = ByteOrder.nativeOrder();

    static void sum(MemorySegment[] rows, long count) {
        float scale = 1f / rows.length;
        for (long i = 0; i + F.length() <= count; i += F.length()) {
            long b = i * 4;
            FloatVector v = FloatVector.fromMemorySegment(F, rows[0], b, ORDER);
            for (int j = 1; j < rows.length; j++) v = v.add(FloatVector.fromMemorySegment(F, rows[j], b, ORDER));
            v = v.mul(scale);
            for (MemorySegment row : rows) v.intoMemorySegment(row, b, ORDER);
        }
    }

    /** Averages groups of F.length() elements while each is certified; returns where it stopped. */
    static long exact(MemorySegment[] rows, long count) {
        int n = rows.length, g = F.length();
        long half = D.length() * 4L;
        DoubleVector bound = DoubleVector.broadcast(D, Math.scalb(1.0, -51));
        DoubleVector scale = DoubleVector.broadcast(D, 1.0 / n);
        DoubleVector cap = DoubleVector.broadcast(D, Double.MAX_VALUE);
        DoubleVector halfV = DoubleVector.broadcast(D, 0.5);
        DoubleVector span = DoubleVector.broadcast(D, Math.scalb(1.0, 28));
        long k = 0;
        while (k + g <= count) {
            long at = k * 4;
            DoubleVector s0 = null, s1 = null, a0 = null, a1 = null;
            IntVector low0 = null, low1 = null;
            for (int j = 0; j < n; j++) {
                FloatVector z0 = FloatVector.fromMemorySegment(H, rows[j], at, ORDER);
                FloatVector z1 = FloatVector.fromMemorySegment(H, rows[j], at + half, ORDER);
                DoubleVector y0 = (DoubleVector) z0.convertShape(VectorOperators.F2D, D, 0);
                DoubleVector y1 = (DoubleVector) z1.convertShape(VectorOperators.F2D, D, 0);
                IntVector m0 = z0.reinterpretAsInts().and(0x7FFFFFFF).sub(1).and(0x7FFFFFFF);
                IntVector m1 = z1.reinterpretAsInts().and(0x7FFFFFFF).sub(1).and(0x7FFFFFFF);
                if (j == 0) { s0 = y0; s1 = y1; a0 = y0.abs(); a1 = y1.abs(); low0 = m0; low1 = m1; continue; }
                s0 = s0.add(y0); s1 = s1.add(y1); a0 = a0.add(y0.abs()); a1 = a1.add(y1.abs());
                low0 = low0.min(m0); low1 = low1.min(m1);
            }
            VectorMask<Double> e0 = a0.compare(VectorOperators.LE, ((DoubleVector) low0.add(1).reinterpretAsFloats().convertShape(VectorOperators.F2D, D, 0)).mul(span).min(cap));
            VectorMask<Double> e1 = a1.compare(VectorOperators.LE, ((DoubleVector) low1.add(1).reinterpretAsFloats().convertShape(VectorOperators.F2D, D, 0)).mul(span).min(cap));
            s0 = s0.mul(scale); s1 = s1.mul(scale);
            FloatVector f0 = (FloatVector) s0.convertShape(VectorOperators.D2F, H, 0);
            FloatVector f1 = (FloatVector) s1.convertShape(VectorOperators.D2F, H, 0);
            DoubleVector b0 = (DoubleVector) f0.convertShape(VectorOperators.F2D, D, 0);
            DoubleVector b1 = (DoubleVector) f1.convertShape(VectorOperators.F2D, D, 0);
            DoubleVector p0 = (DoubleVector) f0.reinterpretAsInts().and(0x7FFFFFFF).sub(1).max(0).reinterpretAsFloats().convertShape(VectorOperators.F2D, D, 0);
            DoubleVector p1 = (DoubleVector) f1.reinterpretAsInts().and(0x7FFFFFFF).sub(1).max(0).reinterpretAsFloats().convertShape(VectorOperators.F2D, D, 0);
            VectorMask<Double> ok0 = s0.sub(b0).abs().add(a0.mul(bound)).compare(VectorOperators.LE, b0.abs().sub(p0).mul(halfV).min(cap)).or(e0);
            VectorMask<Double> ok1 = s1.sub(b1).abs().add(a1.mul(bound)).compare(VectorOperators.LE, b1.abs().sub(p1).mul(halfV).min(cap)).or(e1);
            if (!ok0.and(ok1).allTrue()) return k;
            for (MemorySegment row : rows) { f0.intoMemorySegment(row, at, ORDER); f1.intoMemorySegment(row, at + half, ORDER); }
            k += g;
        }
        return k;
    }

    static double best(MemorySegment[] rows, long count) {
        long best = Long.MAX_VALUE;
        for (int it = 0; it < 200; it++) {
            long t0 = System.nanoTime();
            sum(rows, count);
            best = Math.min(best, System.nanoTime() - t0);
        }
        return best / 1e3;
    }

    public static void main(String[] args) {
        long count = args.length > 0 ? Long.parseLong(args[0]) : 65536;
        String kase = args.length > 1 ? args[1] : "exact";
        MemorySegment[] rows = new MemorySegment[4];
        for (int j = 0; j < rows.length; j++) {
            rows[j] = Arena.global().allocate(count * 4, 64);
            for (long k = 0; k < count; k++) rows[j].setAtIndex(ValueLayout.JAVA_FLOAT, k, (k * 7919 + j * 104729) % 1000 * 1e-3f);
        }
        StringBuilder before = new StringBuilder(), after = new StringBuilder();
        for (int r = 0; r < 8; r++) before.append(String.format(" %.1f", best(rows, count)));
        switch (kase) {
            case "exact" -> { for (int q = 0; q < 300; q++) exact(rows, count); }
            case "heap" -> System.out.println(FloatVector.fromMemorySegment(F, MemorySegment.ofArray(new float[64]), 0, ORDER).lane(0));
            default -> { }
        }
        for (int r = 0; r < 8; r++) after.append(String.format(" %.1f", best(rows, count)));
        System.out.println(kase + " before (µs):" + before + "\n" + kase + " after  (µs):" + after);
    }
}
