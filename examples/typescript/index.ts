// The reference stack from TypeScript. Every argument is plain (a literal or a config value, never an Output):
// it decides which resources exist. Omitted arguments take the reference defaults (see the README's config table).
import * as pulumi from "@pulumi/pulumi";
import * as rayEfaEks from "@pulumi/ray-efa-eks";

const stack = new rayEfaEks.EfaRayCluster("ray-efa-prod", {
    region: "us-east-1",
    gpuInstanceType: "g6.12xlarge",
    gpuNodeCount: 2,
    gpuRootVolumeGiB: 300,
    efa: true,
    endpointPublicAccessCidrs: ["203.0.113.0/24"],
    efaCheckWaitSeconds: 1800,
    efaCheckMinBusbwFraction: 0.5,
    checkpointNoncurrentVersionDays: 14,
    imdsHopLimit: 1,
});

export const clusterName = stack.clusterName;
export const kubeconfig = stack.kubeconfig; // a secret: `pulumi stack output kubeconfig --show-secrets`
export const rayAuthToken = stack.rayAuthToken; // a secret
export const rayDashboard = stack.rayDashboard;
export const estimatedHourlyUsd = stack.estimatedHourlyUsd;
export const teardownOrder = stack.teardownOrder;
