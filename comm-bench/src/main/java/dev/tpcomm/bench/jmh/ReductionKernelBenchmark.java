package dev.tpcomm.bench.jmh;

import dev.tpcomm.DType;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * The local backend's reduction kernels per dtype: a 4-rank SUM all-reduce of 1 MiB per rank (in
 * cache), where the time is the kernel's (read four buffers, write the sum into all four).
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
public class ReductionKernelBenchmark {
    static final int OPS = 50;

    @Param({"Float32", "Float64", "Float16", "BFloat16", "Int8", "Int32", "Int64"})
    public String dtype;

    @Param({"1048576"})
    public int bytes;

    private LocalCollectiveHarness harness;

    @Setup
    public void setup() {
        DType d = DType.valueOf(dtype);
        harness = new LocalCollectiveHarness(4, d, bytes / d.getByteSize());
    }

    @TearDown
    public void tearDown() {
        harness.close();
    }

    @Benchmark
    @OperationsPerInvocation(OPS)
    public void allReduce4Ranks() {
        harness.allReduce(OPS);
    }
}
