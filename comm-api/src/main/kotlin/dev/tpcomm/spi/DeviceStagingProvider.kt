package dev.tpcomm.spi

/**
 * Offers a [DeviceStaging] to [DeviceStagingRegistry] through `java.util.ServiceLoader`: list the
 * implementing class in `META-INF/services/dev.tpcomm.spi.DeviceStagingProvider`. It needs a public
 * no-argument constructor.
 *
 * The registry calls [create] at most once per process, the first time it looks for a staging,
 * so a provider may load native libraries there.
 */
public fun interface DeviceStagingProvider {
    /**
     * The staging this provider offers in this process, or null when it is not available here (the
     * GPU runtime or the device is missing). A provider may instead throw an exception whose message
     * says why (which library to install): any exception or linkage error counts as not available,
     * and its message is kept in [DeviceStagingRegistry.unavailable].
     */
    public fun create(): DeviceStaging?
}
