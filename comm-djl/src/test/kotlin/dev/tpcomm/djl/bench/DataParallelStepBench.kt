package dev.tpcomm.djl.bench

import ai.djl.Model
import ai.djl.ndarray.NDList
import ai.djl.ndarray.types.Shape
import ai.djl.nn.Activation
import ai.djl.nn.SequentialBlock
import ai.djl.nn.core.Linear
import ai.djl.training.DefaultTrainingConfig
import ai.djl.training.Trainer
import ai.djl.training.loss.Loss
import ai.djl.training.optimizer.Optimizer
import ai.djl.training.tracker.Tracker
import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.djl.DataParallel
import dev.tpcomm.djl.asTensor
import dev.tpcomm.djl.toTensor
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.sync.Mutex
import kotlinx.coroutines.sync.withLock
import java.util.Random
import kotlin.system.exitProcess

/**
 * `scripts/djl-bench.sh`: the data-parallel DJL training step as a user's loop runs it, phase by
 * phase (forward + backward, gradient averaging, optimizer), median microseconds of rank 0 over
 * `--steps` steps after `--warmup`. `--mode buckets` averages with [DataParallel] (persistent
 * buckets, gradients as bucket views: one all-reduce per bucket, no copy); `--mode copy` is the
 * glue written without comm-djl: each gradient copied into a fresh tensor, all-reduced on its own,
 * copied back. `--backend local --world N` runs N in-process ranks (their forward/backward passes
 * take turns: DJL collects gradients for one pass at a time per JVM); `--backend mpi` is one rank of
 * an mpirun job. Model: MLP `--inputs` -> `--hidden` -> `--hidden` -> 10, `--batch` rows per rank.
 * Prints one line of `key=value` fields.
 */
object DataParallelStepBench {
    private class Options(
        val backend: String, val world: Int, val mode: String, val steps: Int, val warmup: Int,
        val inputs: Int, val hidden: Int, val batch: Int,
    )

    @JvmStatic
    fun main(args: Array<String>) {
        val kv = args.toList().chunked(2).associate { (k, v) -> k.removePrefix("--") to v }
        val o = Options(
            backend = kv["backend"] ?: "local", world = kv["world"]?.toInt() ?: 2, mode = kv["mode"] ?: "buckets",
            steps = kv["steps"]?.toInt() ?: 200, warmup = kv["warmup"]?.toInt() ?: 30,
            inputs = kv["inputs"]?.toInt() ?: 64, hidden = kv["hidden"]?.toInt() ?: 256, batch = kv["batch"]?.toInt() ?: 32,
        )
        require(o.mode == "buckets" || o.mode == "copy") { "--mode is buckets or copy" }
        System.setProperty("ai.djl.pytorch.num_threads", "1")
        System.setProperty("ai.djl.pytorch.num_interop_threads", "1")
        val line = if (o.backend == "local") {
            val lock = Mutex()
            runBlocking(Dispatchers.Default) { runLocalWorld(o.world, CommConfig(worldSize = o.world)) { comm -> run(comm, o, lock) } }.first()
        } else {
            runBlocking { Comm.create(o.backend, CommConfig.fromEnvironment()).use { comm -> run(comm, o, null) } }
        }
        line?.let(::println)
        System.out.flush()
        exitProcess(0)
    }

    private suspend fun run(comm: Communicator, o: Options, lock: Mutex?): String? {
        val block = SequentialBlock()
            .add(Linear.builder().setUnits(o.hidden.toLong()).build()).add(Activation.reluBlock())
            .add(Linear.builder().setUnits(o.hidden.toLong()).build()).add(Activation.reluBlock())
            .add(Linear.builder().setUnits(10).build())
        val rnd = Random(42L + comm.rank)
        val x = FloatArray(o.batch * o.inputs) { rnd.nextGaussian().toFloat() }
        val y = FloatArray(o.batch * 10) { rnd.nextGaussian().toFloat() }
        Model.newInstance("bench-${comm.rank}").use { model ->
            model.block = block
            val config = DefaultTrainingConfig(Loss.l2Loss()).optOptimizer(Optimizer.sgd().setLearningRateTracker(Tracker.fixed(0.01f)).build())
            model.newTrainer(config).use { trainer ->
                trainer.initialize(Shape(o.batch.toLong(), o.inputs.toLong()))
                val dp = DataParallel(comm, model.block)
                dp.broadcastParameters(0)
                val gradBytes = dp.buckets.sumOf { it.buffer.byteSize }
                val phases = Array(5) { LongArray(o.steps) }
                for (s in 0 until o.warmup + o.steps) {
                    val t0 = System.nanoTime()
                    if (lock == null) forwardBackward(trainer, x, y, o) else lock.withLock { forwardBackward(trainer, x, y, o) }
                    val tw = System.nanoTime()
                    comm.barrier()
                    val t1 = System.nanoTime()
                    if (o.mode == "buckets") dp.averageGradients() else averageByCopies(comm, model.block.parameters.values().map { it.array })
                    val t2 = System.nanoTime()
                    trainer.step()
                    val t3 = System.nanoTime()
                    if (s >= o.warmup) {
                        val i = s - o.warmup
                        phases[0][i] = tw - t0; phases[1][i] = t2 - t1; phases[2][i] = t3 - t2; phases[3][i] = (t3 - t0) - (t1 - tw); phases[4][i] = t1 - tw
                    }
                }
                dp.close()
                comm.barrier()
                if (comm.rank != 0) return null
                fun med(a: LongArray) = "%.1f".format(a.sorted()[a.size / 2] / 1000.0)
                return "impl=djl-dp mode=${o.mode} backend=${comm.backendName} world=${comm.worldSize} grad_bytes=$gradBytes buckets=${dp.buckets.size} " +
                    "fwd_bwd_us=${med(phases[0])} wait_us=${med(phases[4])} average_us=${med(phases[1])} optimizer_us=${med(phases[2])} step_us=${med(phases[3])}"
            }
        }
    }

    private fun forwardBackward(trainer: Trainer, x: FloatArray, y: FloatArray, o: Options) {
        trainer.manager.newSubManager().use { m ->
            val input = m.create(x, Shape(o.batch.toLong(), o.inputs.toLong()))
            val label = m.create(y, Shape(o.batch.toLong(), 10))
            trainer.newGradientCollector().use { gc -> gc.backward(trainer.loss.evaluate(NDList(label), trainer.forward(NDList(input)))) }
        }
    }

    /** Without comm-djl's buckets: one all-reduce per gradient, on a copy, copied back. */
    private suspend fun averageByCopies(comm: Communicator, arrays: List<ai.djl.ndarray.NDArray>) {
        for (a in arrays) a.gradient.use { grad ->
            grad.toTensor().use { t ->
                comm.allReduce(t, ReduceOp.Avg)
                grad.asTensor().copyFrom(t)
            }
        }
    }
}
