package dev.tpcomm.djl.example

import ai.djl.Model
import ai.djl.ndarray.NDList
import ai.djl.ndarray.types.Shape
import ai.djl.nn.Activation
import ai.djl.nn.Block
import ai.djl.nn.SequentialBlock
import ai.djl.nn.core.Linear
import ai.djl.training.DefaultTrainingConfig
import ai.djl.training.Trainer
import ai.djl.training.loss.Loss
import ai.djl.training.optimizer.Optimizer
import ai.djl.training.tracker.Tracker
import dev.tpcomm.Communicator
import dev.tpcomm.djl.DataParallel
import kotlinx.coroutines.sync.Mutex
import kotlinx.coroutines.sync.withLock
import java.util.Random

/**
 * The data-parallel training example (docs/djl.md): a small MLP on synthetic data with fixed
 * seeds, trained either in one process on the whole batch ([trainSingleProcess]) or on every rank of
 * a communicator on its share of the batch with the gradients averaged by [DataParallel]
 * ([trainDataParallel]). Both return the final parameters, which must agree.
 */
object DataParallelMlp {
    const val INPUTS = 8
    const val HIDDEN = 32
    const val OUTPUTS = 2
    const val GLOBAL_BATCH = 16 // divisible by 1, 2 and 4 ranks
    const val STEPS = 8

    fun block(): Block = SequentialBlock()
        .add(Linear.builder().setUnits(HIDDEN.toLong()).build())
        .add(Activation.tanhBlock())
        .add(Linear.builder().setUnits(OUTPUTS.toLong()).build())

    private fun trainingConfig() = DefaultTrainingConfig(Loss.l2Loss())
        .optOptimizer(Optimizer.sgd().setLearningRateTracker(Tracker.fixed(0.1f)).optMomentum(0.9f).build())

    /** Inputs and labels of [step]'s global batch, row-major: `GLOBAL_BATCH x INPUTS` and `GLOBAL_BATCH x OUTPUTS`. */
    fun batch(step: Int): Pair<FloatArray, FloatArray> {
        val rnd = Random(1_000L + step)
        val x = FloatArray(GLOBAL_BATCH * INPUTS) { rnd.nextGaussian().toFloat() }
        val y = FloatArray(GLOBAL_BATCH * OUTPUTS) { i ->
            val row = i / OUTPUTS
            val o = i % OUTPUTS
            var s = 0.0
            for (k in 0 until INPUTS) s += x[row * INPUTS + k] * (if ((k + o) % 3 == 0) 0.5 else -0.25)
            kotlin.math.sin(s).toFloat()
        }
        return x to y
    }

    /** Sets every parameter of [block] to values drawn from `Random(seed)`, in the block's order. */
    fun initialize(block: Block, seed: Long) {
        val rnd = Random(seed)
        for (p in block.parameters.values()) {
            val a = p.array
            a.set(FloatArray(a.shape.size().toInt()) { (rnd.nextGaussian() * 0.3).toFloat() })
        }
    }

    private fun parameters(block: Block): List<FloatArray> = block.parameters.values().map { it.array.toFloatArray() }

    /** One step's forward and backward pass on rows `[from, from + rows)` of [step]'s batch. */
    private fun forwardBackward(trainer: Trainer, step: Int, from: Int, rows: Int) {
        val (x, y) = batch(step)
        trainer.manager.newSubManager().use { m ->
            val input = m.create(x.copyOfRange(from * INPUTS, (from + rows) * INPUTS), Shape(rows.toLong(), INPUTS.toLong()))
            val label = m.create(y.copyOfRange(from * OUTPUTS, (from + rows) * OUTPUTS), Shape(rows.toLong(), OUTPUTS.toLong()))
            trainer.newGradientCollector().use { gc ->
                val prediction = trainer.forward(NDList(input))
                gc.backward(trainer.loss.evaluate(NDList(label), prediction))
            }
        }
    }

    /** The reference: one model trained on the whole batch of every step. */
    fun trainSingleProcess(steps: Int = STEPS): List<FloatArray> =
        Model.newInstance("mlp-single").use { model ->
            model.block = block()
            model.newTrainer(trainingConfig()).use { trainer ->
                trainer.initialize(Shape(GLOBAL_BATCH.toLong(), INPUTS.toLong()))
                initialize(model.block, seed = 0)
                repeat(steps) { step ->
                    forwardBackward(trainer, step, 0, GLOBAL_BATCH)
                    trainer.step()
                }
                parameters(model.block)
            }
        }

    // README-SNIPPET-BEGIN djl-data-parallel
    /**
     * Data-parallel training on [comm]'s rank: this rank's replica starts from rank 0's weights, trains on
     * its share of each global batch, and averages gradients with the other ranks before each step.
     * [computeLock]: ranks that share a JVM (runLocalWorld) take turns for forward/backward, since DJL
     * collects gradients for one pass at a time per JVM; under mpirun pass null.
     */
    suspend fun trainDataParallel(comm: Communicator, steps: Int = STEPS, computeLock: Mutex? = null): List<FloatArray> {
        val rows = GLOBAL_BATCH / comm.worldSize
        Model.newInstance("mlp-rank-${comm.rank}").use { model ->
            model.block = block()
            model.newTrainer(trainingConfig()).use { trainer ->
                trainer.initialize(Shape(rows.toLong(), INPUTS.toLong()))
                initialize(model.block, seed = comm.rank.toLong()) // different on every rank ...
                DataParallel(comm, model.block).use { dp ->
                    dp.broadcastParameters(root = 0)                  // ... until rank 0's weights are broadcast
                    repeat(steps) { step ->
                        if (computeLock == null) forwardBackward(trainer, step, comm.rank * rows, rows)
                        else computeLock.withLock { forwardBackward(trainer, step, comm.rank * rows, rows) }
                        dp.averageGradients()                         // one all-reduce per bucket, no copies
                        trainer.step()
                    }
                }
                return parameters(model.block)
            }
        }
    }
    // README-SNIPPET-END djl-data-parallel
}
