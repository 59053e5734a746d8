package dev.tpcomm.djl

import ai.djl.Model
import ai.djl.ndarray.NDList
import ai.djl.ndarray.types.Shape
import ai.djl.nn.Block
import ai.djl.training.DefaultTrainingConfig
import ai.djl.training.Trainer
import ai.djl.training.loss.Loss
import ai.djl.training.optimizer.Optimizer
import ai.djl.training.tracker.Tracker
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.djl.example.DataParallelMlp
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.sync.Mutex
import kotlinx.coroutines.sync.withLock
import java.lang.foreign.MemorySegment
import java.util.concurrent.Callable
import java.util.concurrent.Executors

private const val ROWS = 4

private inline fun <R> withTrainer(name: String, seed: Long = 0, block: Block = DataParallelMlp.block(), body: (Trainer) -> R): R =
    Model.newInstance(name).use { model ->
        model.block = block
        val config = DefaultTrainingConfig(Loss.l2Loss()).optOptimizer(Optimizer.sgd().setLearningRateTracker(Tracker.fixed(0.1f)).build())
        model.newTrainer(config).use { trainer ->
            trainer.initialize(Shape(ROWS.toLong(), DataParallelMlp.INPUTS.toLong()))
            DataParallelMlp.initialize(model.block, seed)
            body(trainer)
        }
    }

private fun backward(trainer: Trainer, step: Int, rank: Int) {
    val (x, y) = DataParallelMlp.batch(step)
    trainer.manager.newSubManager().use { m ->
        val input = m.create(x.copyOfRange(rank * ROWS * DataParallelMlp.INPUTS, (rank + 1) * ROWS * DataParallelMlp.INPUTS), Shape(ROWS.toLong(), DataParallelMlp.INPUTS.toLong()))
        val label = m.create(y.copyOfRange(rank * ROWS * DataParallelMlp.OUTPUTS, (rank + 1) * ROWS * DataParallelMlp.OUTPUTS), Shape(ROWS.toLong(), DataParallelMlp.OUTPUTS.toLong()))
        trainer.newGradientCollector().use { gc -> gc.backward(trainer.loss.evaluate(NDList(label), trainer.forward(NDList(input)))) }
    }
}

private fun gradientAddress(trainer: Trainer, i: Int): Long =
    trainer.model.block.parameters.values()[i].array.gradient.use { MemorySegment.ofBuffer(it.toByteBuffer(true)).address() }

private fun gradient(trainer: Trainer, i: Int): FloatArray = trainer.model.block.parameters.values()[i].array.gradient.use { it.toFloatArray() }

/** DataParallel from the user's side: where the gradients live, the buckets, the Java-style blocking API, misuse. */
class DataParallelTest : FunSpec({
    test("the gradients become the bucket slices: backward writes into the buckets, the optimizer zeroes them there, no step copies") {
        val lock = Mutex()
        val averagedPerRank = runLocalWorld(2, CommConfig(worldSize = 2)) { comm ->
            withTrainer("views-${comm.rank}", seed = 0) { trainer ->
                DataParallel(comm, trainer.model.block).use { dp ->
                    dp.buckets shouldHaveSize 1 // 4 small parameters, far below 25 MiB
                    val slices = dp.buckets.single().tensors
                    dp.parameterNames shouldBe trainer.model.block.parameters.keys()
                    (0 until 3).map { step ->
                        lock.withLock { backward(trainer, step, comm.rank) }
                        if (step > 0) {
                            // backward accumulated this step's local gradient straight into the bucket
                            slices.indices.forEach { i -> gradientAddress(trainer, i) shouldBe slices[i].address }
                            slices[0].toFloatArray().toList() shouldBe gradient(trainer, 0).toList()
                            slices[0].toFloatArray().any { it != 0f } shouldBe true
                        }
                        val local = gradient(trainer, 0)
                        dp.averageGradients()
                        slices.indices.forEach { i -> gradientAddress(trainer, i) shouldBe slices[i].address }
                        val averaged = gradient(trainer, 0)
                        averaged.toList() shouldNotBe local.toList() // not this rank's own gradient
                        trainer.step()
                        dp.buckets.single().buffer.toFloatArray().all { it == 0f } shouldBe true
                        averaged.toList()
                    }
                }
            }
        }
        averagedPerRank[0] shouldBe averagedPerRank[1] // the same average on both ranks, every step
    }

    test("bucketCapBytes splits the parameters into buckets, in the block's order") {
        val world = LocalWorld(1)
        withTrainer("buckets") { trainer ->
            val names = trainer.model.block.parameters.keys()
            DataParallel(world.communicator(0), trainer.model.block, bucketCapBytes = 1).use { dp ->
                dp.buckets shouldHaveSize names.size
                dp.parameterNames shouldBe names
            }
            // weight 32x8 = 1 KiB; bias 32; weight 2x32 = 256 B; bias 2: 1 KiB fits the first only
            DataParallel(world.communicator(0), trainer.model.block, bucketCapBytes = 1024).use { dp ->
                dp.buckets.map { it.shapes.size } shouldBe listOf(1, 3)
            }
            shouldThrow<IllegalArgumentException> { DataParallel(world.communicator(0), trainer.model.block, bucketCapBytes = 0) }
        }
        world.close()
    }

    test("close gives the gradients torch's memory again, values kept, and training goes on without the buckets") {
        val world = LocalWorld(1)
        withTrainer("close") { trainer ->
            val dp = DataParallel(world.communicator(0), trainer.model.block)
            backward(trainer, 0, 0)
            kotlinx.coroutines.runBlocking { dp.averageGradients() }
            val before = gradient(trainer, 0)
            val slice = dp.buckets.single().tensors[0].address
            dp.close()
            dp.buckets.single().buffer.isClosed shouldBe true
            gradientAddress(trainer, 0) shouldNotBe slice
            gradient(trainer, 0).toList() shouldBe before.toList()
            trainer.step()
            backward(trainer, 1, 0)
            gradient(trainer, 0).any { it != 0f } shouldBe true
            shouldThrow<IllegalStateException> { kotlinx.coroutines.runBlocking { dp.averageGradients() } }.message shouldContain "closed"
            dp.close() // idempotent
        }
        world.close()
    }

    test("closing the model first leaves nothing for close to do but free the buckets") {
        val world = LocalWorld(1)
        val dp = withTrainer("model-first") { trainer ->
            DataParallel(world.communicator(0), trainer.model.block).also {
                backward(trainer, 0, 0)
                it.averageGradientsBlocking()
            }
        }
        shouldThrow<IllegalStateException> { dp.averageGradientsBlocking() }.message shouldContain "closed"
        dp.close()
        dp.buckets.single().buffer.isClosed shouldBe true
        world.close()
    }

    test("blocking calls from plain threads, as Java code makes them") {
        LocalWorld(2, CommConfig(worldSize = 2)).use { world ->
            val computeLock = Any()
            val pool = Executors.newFixedThreadPool(2)
            val results = (0 until 2).map { r ->
                pool.submit(Callable {
                    val comm: Communicator = world.communicator(r)
                    withTrainer("java-$r", seed = r.toLong()) { trainer ->
                        DataParallel(comm, trainer.model.block).use { dp ->
                            dp.broadcastParametersBlocking()
                            synchronized(computeLock) { backward(trainer, 0, r) }
                            dp.averageGradientsBlocking()
                            trainer.step()
                            trainer.model.block.parameters.values().map { it.array.toFloatArray() }
                        }
                    }
                })
            }.map { it.get() }
            pool.shutdown()
            equalBits(results[0], results[1]) shouldBe true
        }
    }

    test("misuse fails with messages that say what to do") {
        val world = LocalWorld(1)
        Model.newInstance("uninitialized").use { model ->
            model.block = DataParallelMlp.block()
            shouldThrow<IllegalArgumentException> { DataParallel(world.communicator(0), model.block) }.message shouldContain "initialize"
        }
        withTrainer("frozen") { trainer ->
            trainer.model.block.freezeParameters(true)
            shouldThrow<IllegalArgumentException> { DataParallel(world.communicator(0), trainer.model.block) }.message shouldContain "no parameter requires a gradient"
            trainer.model.block.freezeParameters(false)
            // before any backward there is no gradient to average
            DataParallel(world.communicator(0), trainer.model.block).use { dp ->
                val e = shouldThrow<IllegalStateException> { dp.averageGradientsBlocking() }
                e.message shouldContain "cannot be made a view of its bucket"
                e.message shouldContain trainer.model.block.parameters.keys()[0]
            }
        }
        world.close()
    }
})
