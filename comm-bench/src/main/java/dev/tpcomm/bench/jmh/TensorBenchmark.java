package dev.tpcomm.bench.jmh;

import dev.tpcomm.DType;
import dev.tpcomm.Tensor;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.infra.Blackhole;

/**
 * Tensor chunk and concat on a 1024 x 1024 float32 tensor (4 MiB): chunk along dim 0 makes views,
 * along dim 1 copies; concat allocates and copies. Results are closed at once so memory is freed
 * eagerly rather than by the garbage collector.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
public class TensorBenchmark {
    private Tensor tensor;
    private List<Tensor> rows;
    private List<Tensor> columns;

    @Setup
    public void setup() {
        tensor = Tensor.zeros(DType.Float32, 1024, 1024);
        rows = tensor.chunk(4, 0);
        columns = tensor.chunk(4, 1);
    }

    @TearDown
    public void tearDown() {
        columns.forEach(Tensor::close);
        tensor.close();
    }

    @Benchmark
    public void chunkDim0View(Blackhole bh) {
        bh.consume(tensor.chunk(4, 0));
    }

    @Benchmark
    public void chunkDim1Copy(Blackhole bh) {
        for (Tensor t : tensor.chunk(4, 1)) {
            bh.consume(t.getNumel());
            t.close();
        }
    }

    @Benchmark
    public long concatDim0() {
        try (Tensor t = Tensor.concat(rows, 0)) {
            return t.getNumel();
        }
    }

    @Benchmark
    public long concatDim1() {
        try (Tensor t = Tensor.concat(columns, 1)) {
            return t.getNumel();
        }
    }
}
