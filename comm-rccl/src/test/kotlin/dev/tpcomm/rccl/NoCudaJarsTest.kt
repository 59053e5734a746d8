package dev.tpcomm.rccl

import dev.tpcomm.nccl.NcclCommunicator
import dev.tpcomm.nccl.NcclEngine
import dev.tpcomm.nccl.sim.SimulatedGpuPlatform
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldNotContain

/** comm-rccl depends on comm-nccl's engine with every org.bytedeco artifact excluded: an AMD user never loads CUDA jars. */
class NoCudaJarsTest : FunSpec({
    test("no org.bytedeco jar is on the classpath and its classes are not loadable") {
        System.getProperty("java.class.path").lowercase() shouldNotContain "bytedeco"
        shouldThrow<ClassNotFoundException> { Class.forName("org.bytedeco.cuda.global.nccl") }
        shouldThrow<ClassNotFoundException> { Class.forName("org.bytedeco.cuda.global.cudart") }
        shouldThrow<ClassNotFoundException> { Class.forName("org.bytedeco.javacpp.Pointer") }
    }

    test("the engine loads and initialises without them") {
        Class.forName(NcclCommunicator::class.java.name, true, javaClass.classLoader).simpleName shouldBe "NcclCommunicator"
        NcclEngine.UNIQUE_ID_BYTES shouldBe 128
        SimulatedGpuPlatform().use { it.deviceCount shouldBe 8 }
    }
})
