package dev.tpcomm.bench

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import java.nio.file.Path

/**
 * Settings of one benchmark run, as parsed from the command line by [parse].
 *
 * @property backend `local` (ranks are coroutines in this JVM) or `mpi` (processes under mpirun).
 * @property ops the collectives to measure, in order.
 * @property world number of ranks.
 * @property mpi which MPI implementation launches the workers: `openmpi` or `mpich`.
 * @property sizes bytes per rank, in order.
 * @property dtype element type.
 * @property redop reduction for the reducing collectives.
 * @property root root rank of broadcast and reduce.
 * @property warmup warm-up iterations per size; null warms up until the time per call has settled
 * ([WarmUpSettling]: no chunk of calls 5% faster than the best for 0.5 s, and at least 300,000 calls
 * or 2 s) or [warmupSeconds] passed.
 * @property warmupSeconds the warm-up's time limit when [warmup] is null.
 * @property iters timed iterations per repeat; null calibrates them to [timeBudgetSeconds].
 * @property timeBudgetSeconds target duration of one timed repeat when [iters] is null.
 * @property repeats timed repeats per size; the median is reported.
 * @property firstCalls calls timed at each size before its warm-up (the `first` column: what a loop
 * pays for its first calls at a new size, next to the steady state); 0 times none.
 * @property csv file the CSV result lines go to; [appendCsv] appends instead of overwriting.
 * @property repeatsCsv file for every repeat's time (`impl,collective,world,bytes,K,t1_us,...`).
 * @property plot PNG file for the busbw-against-size plot.
 * @property compare CSV files (the peers' `results.csv`) drawn on the same plot.
 * @property check whether each size is checked for correctness (`#wrong`).
 * @property progress whether a progress bar goes to stderr.
 * @property impl the CSV `impl` label; null derives it from the backend.
 * @property mpirun the mpirun program; null picks `mpirun.openmpi` or `mpirun.mpich`.
 * @property worker true inside a process mpirun started (internal: set by the launcher).
 * @property timeoutSeconds deadline of every collective.
 * @property dispatcher where each rank's benchmark loop runs: `auto` (the default: `single` for the
 * local backend, `native` for MPI); local: `single` (every rank coroutine on one thread, so a
 * rendezvous wakes no other thread; the backend still runs big reductions on its kernel helper
 * threads) or `pool` (`Dispatchers.Default`, one coroutine per rank spread over its threads);
 * MPI: `native` (the communicator's own thread, so each call reaches MPI without a thread hop, as
 * comm-mpi recommends for hot loops) or `caller` (the main thread: one hop there and back per call).
 */
public data class BenchOptions(
    val backend: String = "local",
    val ops: List<BenchOp> = listOf(BenchOp.AllReduce),
    val world: Int = 4,
    val mpi: String = "openmpi",
    val sizes: List<Long> = DEFAULT_SIZES,
    val dtype: DType = DType.Float32,
    val redop: ReduceOp = ReduceOp.Sum,
    val root: Int = 0,
    val warmup: Int? = null,
    val warmupSeconds: Double = 10.0,
    val iters: Int? = null,
    val timeBudgetSeconds: Double = 0.1,
    val repeats: Int = 3,
    val firstCalls: Int = 1000,
    val csv: Path? = null,
    val appendCsv: Boolean = false,
    val repeatsCsv: Path? = null,
    val plot: Path? = null,
    val compare: List<Path> = emptyList(),
    val check: Boolean = true,
    val progress: Boolean = true,
    val impl: String? = null,
    val mpirun: String? = null,
    val worker: Boolean = false,
    val timeoutSeconds: Int = 600,
    val dispatcher: String = "auto",
) {
    init {
        require(backend == "local" || backend == "mpi") { "--backend must be local or mpi, got '$backend'" }
        require(mpi == "openmpi" || mpi == "mpich") { "--mpi must be openmpi or mpich, got '$mpi'" }
        require(world >= 1) { "--world must be at least 1, got $world" }
        require(ops.isNotEmpty()) { "--op needs at least one collective" }
        require(sizes.isNotEmpty()) { "no sizes to measure: give --sizes or -b/-e" }
        require(root in 0 until world) { "--root $root is not a rank of a world of $world; use 0..${world - 1}" }
        require(repeats >= 1) { "--repeats must be at least 1, got $repeats" }
        require(firstCalls >= 0) { "--first must be >= 0, got $firstCalls" }
        require(iters == null || iters >= 1) { "--iters must be at least 1, got $iters" }
        require(warmup == null || warmup >= 0) { "--warmup must be >= 0, got $warmup" }
        require(warmupSeconds >= 0) { "--warmup-time must be >= 0, got $warmupSeconds" }
        require(timeBudgetSeconds > 0) { "--time must be positive, got $timeBudgetSeconds" }
        require(dispatcher in listOf("auto", "single", "pool", "native", "caller")) {
            "--dispatcher must be auto, single or pool (local), native or caller (mpi), got '$dispatcher'"
        }
        require(dispatcher == "auto" || (backend == "local") == (dispatcher == "single" || dispatcher == "pool")) {
            "--dispatcher $dispatcher does not apply to --backend $backend; use ${if (backend == "local") "single or pool" else "native or caller"}"
        }
        require(timeoutSeconds > 0) { "--timeout must be positive, got $timeoutSeconds" }
        for (s in sizes) {
            require(s % dtype.byteSize == 0L) {
                "size $s bytes is not a whole number of ${dtype.name} elements (${dtype.byteSize} bytes each); pick sizes that are multiples of ${dtype.byteSize}"
            }
            require(s / dtype.byteSize * world <= Int.MAX_VALUE) {
                "size $s bytes x world $world is more elements than one tensor dimension holds; use smaller sizes"
            }
        }
        for (op in ops) {
            if (op.reduces) {
                require(redop.supports(dtype)) {
                    if (dtype == DType.Bool) "--redop avg does not apply to Bool; use sum/max (or), prod/min (and) or a bitwise op"
                    else "--redop ${redop.name.lowercase()} does not apply to ${dtype.name}; use an integer --dtype or sum/prod/min/max/avg"
                }
            }
        }
    }

    /** The CSV `impl` label: `tpcomm_local`, `tpcomm_mpi_openmpi` or `tpcomm_mpi_mpich`, unless [impl] is given. */
    val implLabel: String get() = impl ?: if (backend == "local") "tpcomm_local" else "tpcomm_mpi_$mpi"

    public companion object {
        /** The peers' sizes: 8 B, 1 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB. */
        public val DEFAULT_SIZES: List<Long> = listOf(8L, 1L shl 10, 64L shl 10, 1L shl 20, 16L shl 20, 64L shl 20)

        /** Usage text printed by `--help` and after a bad argument. */
        public val USAGE: String = """
            |Usage: scripts/bench.sh [options]        (nccl-tests-style collective benchmark)
            |  --backend local|mpi      in-process coroutine ranks, or processes under mpirun (default local)
            |  --op NAME[,NAME..]|all   all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all
            |  --world N, -g N          number of ranks (default 4); mpi launches mpirun -np N itself
            |  --mpi openmpi|mpich      MPI implementation for --backend mpi (default openmpi)
            |  --mpirun PATH            mpirun program to use (default mpirun.openmpi / mpirun.mpich)
            |  --sizes LIST             bytes per rank, e.g. 8,1K,64K,1M,16M,64M (the default)
            |  -b MIN -e MAX [-f F|-i I] a size range: multiply by F (default 2) or add I
            |  --dtype, -d TYPE         float32|float|float64|double|float16|half|bfloat16|int8|uint8|int32|int64
            |                           |uint32|uint64|f8e4m3|f8e5m2|int16|bool
            |  --redop, -o OP           sum|prod|min|max|avg|band|bor|bxor (default sum)
            |  --root, -r R             root of broadcast and reduce (default 0)
            |  --warmup, -w N           warm-up iterations per size (default: until the time per call settles:
            |                           no chunk of calls 5% faster than the best for 0.5 s, and at least
            |                           300000 calls or 2 s)
            |  --warmup-time SECONDS    time limit of the default warm-up (default 10)
            |  --iters, -n N            timed iterations per repeat (default: calibrated to --time)
            |  --time SECONDS           target time of one timed repeat when --iters is not given (default 0.1)
            |  --repeats N              timed repeats per size, median reported (default 3)
            |  --first N                calls timed at each size before its warm-up: the "first" column (default 1000, 0: none)
            |  --csv FILE [--append]    CSV lines impl,collective,world,bytes,time_us,algbw_GBps,busbw_GBps
            |  --repeats-csv FILE       every repeat: impl,collective,world,bytes,K,t1_us,t2_us,t3_us
            |  --plot FILE.png          busbw against size, log-log
            |  --compare CSV[,CSV..]    peers' results.csv drawn on the same plot
            |  --impl LABEL             CSV impl label (default tpcomm_local / tpcomm_mpi_<mpi>)
            |  --no-check               skip the correctness check (#wrong shows -)
            |  --no-progress            no progress bar on stderr
            |  --dispatcher D           where each rank's loop runs: auto (default), single or pool (local:
            |                           one thread / Dispatchers.Default), native or caller (mpi: the
            |                           communicator's thread / the main thread, a hop per call)
            |  --timeout SECONDS        deadline of every collective (default 600)
            |  -h, --help               this text
            """.trimMargin()

        /** Parses a dtype name: the enum name or the usual short forms (`float`, `double`, `half`, `bf16`). */
        public fun parseDType(name: String): DType = when (name.trim().lowercase()) {
            "float", "float32", "f32", "fp32" -> DType.Float32
            "double", "float64", "f64", "fp64" -> DType.Float64
            "half", "float16", "f16", "fp16" -> DType.Float16
            "bfloat16", "bf16" -> DType.BFloat16
            "int8", "i8", "char" -> DType.Int8
            "uint8", "u8", "byte" -> DType.UInt8
            "int32", "i32", "int" -> DType.Int32
            "int64", "i64", "long" -> DType.Int64
            "uint32", "u32" -> DType.UInt32
            "uint64", "u64" -> DType.UInt64
            "float8e4m3", "f8e4m3", "fp8e4m3", "e4m3" -> DType.Float8E4M3
            "float8e5m2", "f8e5m2", "fp8e5m2", "e5m2" -> DType.Float8E5M2
            "int16", "i16", "short" -> DType.Int16
            "bool", "boolean" -> DType.Bool
            else -> throw IllegalArgumentException(
                "unknown --dtype '$name'; use float32, float64, float16, bfloat16, int8, uint8, int32, int64, uint32, uint64, " +
                    "f8e4m3, f8e5m2, int16 or bool"
            )
        }

        /** Parses a reduction name: `sum`, `prod`, `min`, `max`, `avg`, `band`, `bor`, `bxor` (or the enum names). */
        public fun parseRedOp(name: String): ReduceOp = when (name.trim().lowercase()) {
            "sum" -> ReduceOp.Sum
            "prod", "product" -> ReduceOp.Product
            "min" -> ReduceOp.Min
            "max" -> ReduceOp.Max
            "avg", "mean" -> ReduceOp.Avg
            "band", "bitwiseand", "and" -> ReduceOp.BitwiseAnd
            "bor", "bitwiseor", "or" -> ReduceOp.BitwiseOr
            "bxor", "bitwisexor", "xor" -> ReduceOp.BitwiseXor
            else -> throw IllegalArgumentException("unknown --redop '$name'; use sum, prod, min, max, avg, band, bor or bxor")
        }

        /**
         * Parses command-line [args]. Returns null when `--help` was asked for.
         *
         * @throws IllegalArgumentException naming the bad argument and what to write instead.
         */
        public fun parse(args: List<String>): BenchOptions? {
            var o = BenchOptions()
            var sizes: List<Long>? = null
            var rangeMin: Long? = null
            var rangeMax: Long? = null
            var factor: Long? = null
            var increment: Long? = null
            var ops: List<BenchOp>? = null
            var rootGiven: Int? = null
            val fields = HashMap<String, Any?>()
            var i = 0
            // Builds the options at the end so that cross-field checks see every argument.
            val expanded = args.flatMap { a ->
                if (a.startsWith("--") && a.contains('=')) listOf(a.substringBefore('='), a.substringAfter('=')) else listOf(a)
            }
            fun value(name: String): String {
                require(i + 1 < expanded.size) { "$name needs a value; see --help" }
                i++
                return expanded[i]
            }
            fun int(name: String): Int = value(name).let { v ->
                v.trim().toIntOrNull() ?: throw IllegalArgumentException("$name needs a whole number, got '$v'")
            }
            while (i < expanded.size) {
                when (val a = expanded[i]) {
                    "-h", "--help" -> return null
                    "--backend" -> fields["backend"] = value(a)
                    "--op", "--ops" -> {
                        val v = value(a)
                        ops = if (v.trim().lowercase() == "all") BenchOp.entries.toList() else v.split(',').filter { it.isNotBlank() }.map { BenchOp.parse(it) }
                    }
                    "--world", "-g", "--np" -> fields["world"] = int(a)
                    "--mpi" -> fields["mpi"] = value(a).trim().lowercase()
                    "--mpirun" -> fields["mpirun"] = value(a)
                    "--sizes" -> sizes = Sizes.parseList(value(a))
                    "-b", "--minbytes" -> rangeMin = Sizes.parse(value(a))
                    "-e", "--maxbytes" -> rangeMax = Sizes.parse(value(a))
                    "-f", "--stepfactor" -> factor = int(a).toLong()
                    "-i", "--stepbytes" -> increment = Sizes.parse(value(a))
                    "--dtype", "-d", "--datatype" -> fields["dtype"] = parseDType(value(a))
                    "--redop", "-o", "--op-reduce" -> fields["redop"] = parseRedOp(value(a))
                    "--root", "-r" -> rootGiven = int(a)
                    "--warmup", "-w", "--warmup_iters" -> fields["warmup"] = int(a)
                    "--iters", "-n" -> fields["iters"] = int(a)
                    "--warmup-time" -> fields["warmupTime"] = value(a).let { v ->
                        v.trim().removeSuffix("s").toDoubleOrNull() ?: throw IllegalArgumentException("$a needs seconds, e.g. 0.5, got '$v'")
                    }
                    "--time", "--time-budget" -> fields["time"] = value(a).let { v ->
                        v.trim().removeSuffix("s").toDoubleOrNull() ?: throw IllegalArgumentException("$a needs seconds, e.g. 0.25, got '$v'")
                    }
                    "--repeats" -> fields["repeats"] = int(a)
                    "--first" -> fields["first"] = int(a)
                    "--csv" -> fields["csv"] = Path.of(value(a))
                    "--append" -> fields["append"] = true
                    "--repeats-csv" -> fields["repeatsCsv"] = Path.of(value(a))
                    "--plot" -> fields["plot"] = Path.of(value(a))
                    "--compare" -> fields["compare"] = value(a).split(',').filter { it.isNotBlank() }.map { Path.of(it.trim()) }
                    "--impl" -> fields["impl"] = value(a)
                    "--no-check", "-c0" -> fields["check"] = false
                    "--no-progress" -> fields["progress"] = false
                    "--progress" -> fields["progress"] = true
                    "--timeout" -> fields["timeout"] = int(a)
                    "--worker" -> fields["worker"] = true
                    "--dispatcher" -> fields["dispatcher"] = value(a).trim().lowercase()
                    else -> throw IllegalArgumentException("unknown argument '$a'; see --help")
                }
                i++
            }
            if (rangeMin != null || rangeMax != null) {
                require(sizes == null) { "give either --sizes or -b/-e, not both" }
                val lo = rangeMin ?: rangeMax!!
                val hi = rangeMax ?: lo
                sizes = Sizes.range(lo, hi, factor ?: if (increment != null) 1 else 2, increment ?: 0)
            } else {
                require(factor == null && increment == null) { "-f/-i need a range: add -b MIN -e MAX" }
            }
            @Suppress("UNCHECKED_CAST")
            o = BenchOptions(
                backend = fields["backend"] as String? ?: o.backend,
                ops = ops ?: o.ops,
                world = fields["world"] as Int? ?: o.world,
                mpi = fields["mpi"] as String? ?: o.mpi,
                sizes = sizes ?: o.sizes,
                dtype = fields["dtype"] as DType? ?: o.dtype,
                redop = fields["redop"] as ReduceOp? ?: o.redop,
                root = rootGiven ?: o.root,
                warmup = fields["warmup"] as Int? ?: o.warmup,
                warmupSeconds = fields["warmupTime"] as Double? ?: o.warmupSeconds,
                iters = fields["iters"] as Int? ?: o.iters,
                timeBudgetSeconds = fields["time"] as Double? ?: o.timeBudgetSeconds,
                repeats = fields["repeats"] as Int? ?: o.repeats,
                firstCalls = fields["first"] as Int? ?: o.firstCalls,
                csv = fields["csv"] as Path? ?: o.csv,
                appendCsv = fields["append"] as Boolean? ?: o.appendCsv,
                repeatsCsv = fields["repeatsCsv"] as Path? ?: o.repeatsCsv,
                plot = fields["plot"] as Path? ?: o.plot,
                compare = fields["compare"] as List<Path>? ?: o.compare,
                check = fields["check"] as Boolean? ?: o.check,
                progress = fields["progress"] as Boolean? ?: o.progress,
                impl = fields["impl"] as String? ?: o.impl,
                mpirun = fields["mpirun"] as String? ?: o.mpirun,
                worker = fields["worker"] as Boolean? ?: o.worker,
                timeoutSeconds = fields["timeout"] as Int? ?: o.timeoutSeconds,
                dispatcher = fields["dispatcher"] as String? ?: o.dispatcher,
            )
            return o
        }
    }
}
