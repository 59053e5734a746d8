package dev.tpcomm.mpi

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.maps.shouldContainExactly
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

class MpiConfigTest : FunSpec({
    test("defaults: MULTIPLE, abort on timeout, blocking progress") {
        val c = MpiConfig.from(emptyMap(), emptyMap())
        c shouldBe MpiConfig()
        c.threadLevel shouldBe MpiThreadLevel.Multiple
        c.effectiveProgress shouldBe MpiProgress.Blocking
        c.copy(abortOnTimeout = false).effectiveProgress shouldBe MpiProgress.NonBlocking
    }

    test("options win over environment variables") {
        val c = MpiConfig.from(
            mapOf(MpiConfig.LIBRARY to "/opt/mpi/lib/libmpi.so", MpiConfig.PROFILING to "true", "mpi.env.OMPI_MCA_btl" to "self,vader"),
            mapOf("TPCOMM_MPI_LIBRARY" to "/ignored.so", "TPCOMM_MPI_THREAD_LEVEL" to "serialized", "TPCOMM_MPI_ABORT_ON_TIMEOUT" to "0"),
        )
        c.library shouldBe "/opt/mpi/lib/libmpi.so"
        c.profiling shouldBe true
        c.threadLevel shouldBe MpiThreadLevel.Serialized
        c.abortOnTimeout shouldBe false
        c.environment shouldContainExactly mapOf("OMPI_MCA_btl" to "self,vader")
    }

    test("invalid values name the key and the accepted values") {
        shouldThrow<IllegalArgumentException> { MpiConfig.from(mapOf(MpiConfig.THREAD_LEVEL to "funneled"), emptyMap()) }
            .message shouldContain "Serialized, Multiple"
        shouldThrow<IllegalArgumentException> { MpiConfig.from(emptyMap(), mapOf("TPCOMM_MPI_PROFILING" to "maybe")) }
            .message shouldContain "TPCOMM_MPI_PROFILING"
        shouldThrow<IllegalArgumentException> { MpiConfig(progress = MpiProgress.Blocking, abortOnTimeout = false) }
            .message shouldContain "abortOnTimeout"
    }

    test("algorithm choices become each implementation's real knobs") {
        val c = MpiConfig(allReduceAlgorithm = MpiAlgorithm.Ring, broadcastAlgorithm = MpiAlgorithm.BinomialTree, allGatherAlgorithm = MpiAlgorithm.Bruck)
        c.initEnvironment(MpiImplementation.OpenMpi) shouldContainExactly mapOf(
            "OMPI_MCA_coll_tuned_use_dynamic_rules" to "1",
            "OMPI_MCA_coll_tuned_allreduce_algorithm" to "4",
            "OMPI_MCA_coll_tuned_bcast_algorithm" to "6",
            "OMPI_MCA_coll_tuned_allgather_algorithm" to "2",
        )
        c.initEnvironment(MpiImplementation.Mpich) shouldContainExactly mapOf(
            "MPIR_CVAR_ALLREDUCE_DEVICE_COLLECTIVE" to "0",
            "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM" to "ring",
            "MPIR_CVAR_BCAST_DEVICE_COLLECTIVE" to "0",
            "MPIR_CVAR_BCAST_INTRA_ALGORITHM" to "binomial",
            "MPIR_CVAR_ALLGATHER_DEVICE_COLLECTIVE" to "0",
            "MPIR_CVAR_ALLGATHER_INTRA_ALGORITHM" to "brucks",
        )
        c.initEnvironment(MpiImplementation.IntelMpi) shouldContainExactly mapOf(
            "I_MPI_ADJUST_ALLREDUCE" to "8", "I_MPI_ADJUST_BCAST" to "1", "I_MPI_ADJUST_ALLGATHER" to "2",
        )
        MpiConfig().initEnvironment(MpiImplementation.OpenMpi) shouldBe emptyMap()
    }

    test("an algorithm the implementation lacks is refused, listing the ones it has") {
        val e = shouldThrow<IllegalArgumentException> { MpiConfig(allReduceAlgorithm = MpiAlgorithm.Linear).initEnvironment(MpiImplementation.Mpich) }
        e.message shouldContain "Ring"
        e.message shouldContain "allReduce"
    }

    test("raw environment entries override the translations") {
        MpiConfig(allReduceAlgorithm = MpiAlgorithm.Ring, environment = mapOf("OMPI_MCA_coll_tuned_allreduce_algorithm" to "6"))
            .initEnvironment(MpiImplementation.OpenMpi)["OMPI_MCA_coll_tuned_allreduce_algorithm"] shouldBe "6"
    }
})
