package dev.tpcomm.examples

/**
 * Command-line settings of the tensor-parallel demo ([DemoOptions.parse]).
 *
 * @property backend `local` (ranks are coroutines in this JVM) or `mpi` (processes under mpirun).
 * @property world number of ranks (tensor-parallel degree).
 * @property mpi `openmpi` or `mpich`, for `--backend mpi`.
 * @property sequenceParallel all-gather / reduce-scatter along the sequence instead of all-reduce.
 * @property model sizes and training settings.
 * @property timingSteps steps timed per round for the with/without-overlap comparison (0: skip it).
 * @property progress whether a progress bar goes to stderr.
 * @property worker true inside a process mpirun started (set by the launcher).
 */
public data class DemoOptions(
    val backend: String = "local",
    val world: Int = 4,
    val mpi: String = "openmpi",
    val mpirun: String? = null,
    val sequenceParallel: Boolean = false,
    val model: MlpConfig = MlpConfig(),
    val timingSteps: Int = 10,
    val progress: Boolean = true,
    val worker: Boolean = false,
    val tolerance: Double = 1e-5,
) {
    init {
        require(backend == "local" || backend == "mpi") { "--backend must be local or mpi, got '$backend'" }
        require(mpi == "openmpi" || mpi == "mpich") { "--mpi must be openmpi or mpich, got '$mpi'" }
        require(world >= 1) { "--world must be at least 1, got $world" }
        require(timingSteps >= 0) { "--timing-steps must be >= 0, got $timingSteps" }
        model.checkShardable(world, sequenceParallel)
    }

    public companion object {
        /** Usage text. */
        public val USAGE: String = """
            |Usage: scripts/demo.sh [options]     (Megatron-style tensor-parallel MLP, checked against a dense model)
            |  --backend local|mpi     coroutine ranks in one JVM (default), or processes under mpirun
            |  --world N               tensor-parallel ranks (default 4)
            |  --mpi openmpi|mpich     MPI implementation for --backend mpi (default openmpi)
            |  --mpirun PATH           the mpirun program (default mpirun.openmpi / mpirun.mpich)
            |  --sequence-parallel     all-gather / reduce-scatter along the sequence instead of all-reduce
            |  --steps N               training steps (default 40)
            |  --hidden H --ffn F --seq S --batch B   sizes (default 256, 1024, 64, 4)
            |  --lr X --seed N         SGD learning rate (default 0.15), seed (default 42)
            |  --timing-steps N        steps per timing round, with and without overlap (default 10; 0 skips)
            |  --no-progress           no progress bar on stderr
            |  -h, --help              this text
            """.trimMargin()

        /** Parses [args]; null when `--help` was asked for. @throws IllegalArgumentException on a bad argument. */
        public fun parse(args: List<String>): DemoOptions? {
            var o = DemoOptions()
            var m = MlpConfig()
            val expanded = args.flatMap { a ->
                if (a.startsWith("--") && a.contains('=')) listOf(a.substringBefore('='), a.substringAfter('=')) else listOf(a)
            }
            var i = 0
            fun value(name: String): String {
                require(i + 1 < expanded.size) { "$name needs a value; see --help" }
                return expanded[++i]
            }
            fun int(name: String): Int = value(name).let { it.toIntOrNull() ?: throw IllegalArgumentException("$name needs a whole number, got '$it'") }
            var backend = o.backend; var world = o.world; var mpi = o.mpi; var mpirun: String? = null
            var sp = false; var timing = o.timingSteps; var progress = true; var worker = false
            while (i < expanded.size) {
                when (val a = expanded[i]) {
                    "-h", "--help" -> return null
                    "--backend" -> backend = value(a)
                    "--world", "--np", "--tp" -> world = int(a)
                    "--mpi" -> mpi = value(a).lowercase()
                    "--mpirun" -> mpirun = value(a)
                    "--sequence-parallel", "--sp" -> sp = true
                    "--steps" -> m = m.copy(steps = int(a))
                    "--hidden" -> m = m.copy(hidden = int(a))
                    "--ffn" -> m = m.copy(ffn = int(a))
                    "--seq" -> m = m.copy(seq = int(a))
                    "--batch" -> m = m.copy(batch = int(a))
                    "--lr" -> m = m.copy(lr = value(a).let { it.toFloatOrNull() ?: throw IllegalArgumentException("--lr needs a number, got '$it'") })
                    "--seed" -> m = m.copy(seed = value(a).let { it.toLongOrNull() ?: throw IllegalArgumentException("--seed needs a whole number, got '$it'") })
                    "--timing-steps" -> timing = int(a)
                    "--no-progress" -> progress = false
                    "--worker" -> worker = true
                    else -> throw IllegalArgumentException("unknown argument '$a'; see --help")
                }
                i++
            }
            o = DemoOptions(backend, world, mpi, mpirun, sp, m, timing, progress, worker)
            return o
        }
    }
}
