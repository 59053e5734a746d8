package dev.tpcomm.bench.jmh;

import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * What the flight recorder's JFR events cost per 8-byte all-reduce (ns per call), in four JVMs with
 * the same code and loop:
 * <ul>
 *   <li>{@code eventsCompiledOut}: {@code -Dtpcomm.jfr=false}; the recorder's {@code static final}
 *       switch is false, so the JIT removes the event code from the compiled path (the build without
 *       events, as the JIT sees it);</li>
 *   <li>{@code eventsOff}: events compiled in, no JFR recording (the default of every job);</li>
 *   <li>{@code jfrTpcommJfc}: a recording with {@code tpcomm.jfc} (events of operations over 1 ms);</li>
 *   <li>{@code jfrEveryOp}: a recording that keeps an event for every operation.</li>
 * </ul>
 * {@code backend}: {@code local1} (a local world of one rank), {@code local2} (two ranks, two
 * threads), {@code mpi} (an MPI singleton world; needs libmpi). Run from the repository root
 * (the .jfc paths are relative): {@code scripts/jmh.sh FlightRecorderOverhead}.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class FlightRecorderOverheadBenchmark {
    static final int OPS = 100_000;

    @Param({"local1", "mpi"})
    public String backend;

    private RecorderOverheadHarness harness;

    @Setup
    public void setup() {
        harness = new RecorderOverheadHarness(backend);
    }

    @TearDown
    public void tearDown() {
        harness.close();
    }

    @Benchmark
    @OperationsPerInvocation(OPS)
    @Fork(jvmArgsPrepend = "-Dtpcomm.jfr=false")
    public void eventsCompiledOut() {
        harness.allReduce(OPS);
    }

    @Benchmark
    @OperationsPerInvocation(OPS)
    public void eventsOff() {
        harness.allReduce(OPS);
    }

    @Benchmark
    @OperationsPerInvocation(OPS)
    @Fork(jvmArgsPrepend = "-XX:StartFlightRecording=settings=tpcomm.jfc,filename=/tmp/tpcomm-jmh-tpcomm.jfr")
    public void jfrTpcommJfc() {
        harness.allReduce(OPS);
    }

    @Benchmark
    @OperationsPerInvocation(OPS)
    @Fork(jvmArgsPrepend = "-XX:StartFlightRecording=settings=comm-bench/jfr/every-op.jfc,filename=/tmp/tpcomm-jmh-every-op.jfr")
    public void jfrEveryOp() {
        harness.allReduce(OPS);
    }
}
