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

/** Small-message latency of the local backend: time per 8-byte all-reduce and per barrier, per rank. */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class LocalLatencyBenchmark {
    static final int OPS = 20_000;

    @Param({"2", "4"})
    public int world;

    private LocalCollectiveHarness harness;

    @Setup
    public void setup() {
        harness = new LocalCollectiveHarness(world, DType.Float32, 2);
    }

    @TearDown
    public void tearDown() {
        harness.close();
    }

    @Benchmark
    @OperationsPerInvocation(OPS)
    public void allReduce8Bytes() {
        harness.allReduce(OPS);
    }

    @Benchmark
    @OperationsPerInvocation(OPS)
    public void barrier() {
        harness.barrier(OPS);
    }
}
