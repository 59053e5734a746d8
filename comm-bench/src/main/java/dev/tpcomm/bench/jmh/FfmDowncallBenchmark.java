package dev.tpcomm.bench.jmh;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * The cost of one java.lang.foreign downcall, the path every MPI call of the MPI backend takes:
 * libc getpid() (no arguments), strlen() on an off-heap string (one pointer argument), and the
 * same with the critical (no thread-state transition) linker option.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class FfmDowncallBenchmark {
    private static final Linker LINKER = Linker.nativeLinker();
    private static final MethodHandle GETPID = LINKER.downcallHandle(
            LINKER.defaultLookup().find("getpid").orElseThrow(),
            FunctionDescriptor.of(ValueLayout.JAVA_INT));
    private static final MethodHandle STRLEN = LINKER.downcallHandle(
            LINKER.defaultLookup().find("strlen").orElseThrow(),
            FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.ADDRESS));
    private static final MethodHandle STRLEN_CRITICAL = LINKER.downcallHandle(
            LINKER.defaultLookup().find("strlen").orElseThrow(),
            FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.ADDRESS),
            Linker.Option.critical(false));

    private Arena arena;
    private MemorySegment text;

    @Setup
    public void setup() {
        arena = Arena.ofShared();
        text = arena.allocateFrom("tpcomm");
    }

    @TearDown
    public void tearDown() {
        arena.close();
    }

    @Benchmark
    public int getpid() throws Throwable {
        return (int) GETPID.invokeExact();
    }

    @Benchmark
    public long strlen() throws Throwable {
        return (long) STRLEN.invokeExact(text);
    }

    @Benchmark
    public long strlenCritical() throws Throwable {
        return (long) STRLEN_CRITICAL.invokeExact(text);
    }
}
