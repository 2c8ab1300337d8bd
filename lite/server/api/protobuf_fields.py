"""Protobuf field tables for the Kubernetes types lite decodes (GENERATED; do not edit by hand).

Made by tests/fixtures/protobuf/gen_fields.py from upstream kubernetes/api and kubernetes/apimachinery
`generated.proto` (field numbers, types) and `types.go` (JSON names, pointers, omitempty) at v0.32.9.
Each field is `number jsonName type`; type is a scalar (`string`, `int64`, ...), a message name,
`[]T` for repeated, `map:T` for map<string, T>; a leading `*` marks a scalar JSON keeps when zero
(a Go pointer, or a field without `omitempty`). Names are the JSON names from the Go struct tags;
an empty name marks an embedded (`json:",inline"`) struct whose fields belong to the parent.
"""

from typing import Final

# (apiVersion/kind) -> message
ROOTS: Final[dict[str, str]] = {
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration":
        "admissionregistration.v1.MutatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy": "admissionregistration.v1.ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding":
        "admissionregistration.v1.ValidatingAdmissionPolicyBinding",
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration":
        "admissionregistration.v1.ValidatingWebhookConfiguration",
    "apps/v1/ControllerRevision": "apps.v1.ControllerRevision",
    "apps/v1/DaemonSet": "apps.v1.DaemonSet",
    "apps/v1/Deployment": "apps.v1.Deployment",
    "apps/v1/ReplicaSet": "apps.v1.ReplicaSet",
    "apps/v1/StatefulSet": "apps.v1.StatefulSet",
    "authentication.k8s.io/v1/SelfSubjectReview": "authentication.v1.SelfSubjectReview",
    "authentication.k8s.io/v1/TokenRequest": "authentication.v1.TokenRequest",
    "authentication.k8s.io/v1/TokenReview": "authentication.v1.TokenReview",
    "authorization.k8s.io/v1/LocalSubjectAccessReview": "authorization.v1.LocalSubjectAccessReview",
    "authorization.k8s.io/v1/SelfSubjectAccessReview": "authorization.v1.SelfSubjectAccessReview",
    "authorization.k8s.io/v1/SelfSubjectRulesReview": "authorization.v1.SelfSubjectRulesReview",
    "authorization.k8s.io/v1/SubjectAccessReview": "authorization.v1.SubjectAccessReview",
    "autoscaling/v1/HorizontalPodAutoscaler": "autoscaling.v1.HorizontalPodAutoscaler",
    "autoscaling/v1/Scale": "autoscaling.v1.Scale",
    "autoscaling/v2/HorizontalPodAutoscaler": "autoscaling.v2.HorizontalPodAutoscaler",
    "batch/v1/CronJob": "batch.v1.CronJob",
    "batch/v1/Job": "batch.v1.Job",
    "certificates.k8s.io/v1/CertificateSigningRequest": "certificates.v1.CertificateSigningRequest",
    "coordination.k8s.io/v1/Lease": "coordination.v1.Lease",
    "discovery.k8s.io/v1/EndpointSlice": "discovery.v1.EndpointSlice",
    "events.k8s.io/v1/Event": "events.v1.Event",
    "meta/v1/DeleteOptions": "apis.meta.v1.DeleteOptions",
    "networking.k8s.io/v1/Ingress": "networking.v1.Ingress",
    "networking.k8s.io/v1/IngressClass": "networking.v1.IngressClass",
    "networking.k8s.io/v1/NetworkPolicy": "networking.v1.NetworkPolicy",
    "node.k8s.io/v1/RuntimeClass": "node.v1.RuntimeClass",
    "policy/v1/Eviction": "policy.v1.Eviction",
    "policy/v1/PodDisruptionBudget": "policy.v1.PodDisruptionBudget",
    "rbac.authorization.k8s.io/v1/ClusterRole": "rbac.v1.ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding": "rbac.v1.ClusterRoleBinding",
    "rbac.authorization.k8s.io/v1/Role": "rbac.v1.Role",
    "rbac.authorization.k8s.io/v1/RoleBinding": "rbac.v1.RoleBinding",
    "scheduling.k8s.io/v1/PriorityClass": "scheduling.v1.PriorityClass",
    "storage.k8s.io/v1/CSIDriver": "storage.v1.CSIDriver",
    "storage.k8s.io/v1/CSINode": "storage.v1.CSINode",
    "storage.k8s.io/v1/CSIStorageCapacity": "storage.v1.CSIStorageCapacity",
    "storage.k8s.io/v1/StorageClass": "storage.v1.StorageClass",
    "storage.k8s.io/v1/VolumeAttachment": "storage.v1.VolumeAttachment",
    "v1/Binding": "core.v1.Binding",
    "v1/ConfigMap": "core.v1.ConfigMap",
    "v1/Endpoints": "core.v1.Endpoints",
    "v1/Event": "core.v1.Event",
    "v1/LimitRange": "core.v1.LimitRange",
    "v1/Namespace": "core.v1.Namespace",
    "v1/Node": "core.v1.Node",
    "v1/PersistentVolume": "core.v1.PersistentVolume",
    "v1/PersistentVolumeClaim": "core.v1.PersistentVolumeClaim",
    "v1/Pod": "core.v1.Pod",
    "v1/PodTemplate": "core.v1.PodTemplate",
    "v1/ReplicationController": "core.v1.ReplicationController",
    "v1/ResourceQuota": "core.v1.ResourceQuota",
    "v1/Secret": "core.v1.Secret",
    "v1/Service": "core.v1.Service",
    "v1/ServiceAccount": "core.v1.ServiceAccount",
}

# message -> its fields, `number jsonName type` joined by `;`, parsed on first use by
# protobuf.py (held as Python dicts, the tables took 0.3 MB)
MESSAGES: Final[dict[str, str]] = {
    "admissionregistration.v1.AuditAnnotation": "1 key *string;2 valueExpression *string",
    "admissionregistration.v1.ExpressionWarning": "2 fieldRef *string;3 warning *string",
    "admissionregistration.v1.MatchCondition": "1 name *string;2 expression *string",
    "admissionregistration.v1.MatchResources": (
        "1 namespaceSelector apis.meta.v1.LabelSelector;2 objectSelector apis.meta.v1.LabelSelector;"
        "3 resourceRules []admissionregistration.v1.NamedRuleWithOperations;"
        "4 excludeResourceRules []admissionregistration.v1.NamedRuleWithOperations;7 matchPolicy *string"
    ),
    "admissionregistration.v1.MutatingWebhook": (
        "1 name *string;2 clientConfig admissionregistration.v1.WebhookClientConfig;"
        "3 rules []admissionregistration.v1.RuleWithOperations;4 failurePolicy *string;"
        "5 namespaceSelector apis.meta.v1.LabelSelector;6 sideEffects *string;7 timeoutSeconds *int32;"
        "8 admissionReviewVersions []string;9 matchPolicy *string;10 reinvocationPolicy *string;"
        "11 objectSelector apis.meta.v1.LabelSelector;"
        "12 matchConditions []admissionregistration.v1.MatchCondition"
    ),
    "admissionregistration.v1.MutatingWebhookConfiguration": (
        "1 metadata apis.meta.v1.ObjectMeta;2 webhooks []admissionregistration.v1.MutatingWebhook"
    ),
    "admissionregistration.v1.NamedRuleWithOperations": (
        "1 resourceNames []string;2  admissionregistration.v1.RuleWithOperations"
    ),
    "admissionregistration.v1.ParamKind": "1 apiVersion string;2 kind string",
    "admissionregistration.v1.ParamRef": (
        "1 name string;2 namespace string;3 selector apis.meta.v1.LabelSelector;"
        "4 parameterNotFoundAction *string"
    ),
    "admissionregistration.v1.Rule": "1 apiGroups []string;2 apiVersions []string;3 resources []string;4 scope *string",
    "admissionregistration.v1.RuleWithOperations": "1 operations []string;2  admissionregistration.v1.Rule",
    "admissionregistration.v1.ServiceReference": "1 namespace *string;2 name *string;3 path *string;4 port *int32",
    "admissionregistration.v1.TypeChecking": "1 expressionWarnings []admissionregistration.v1.ExpressionWarning",
    "admissionregistration.v1.ValidatingAdmissionPolicy": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec admissionregistration.v1.ValidatingAdmissionPolicySpec;"
        "3 status admissionregistration.v1.ValidatingAdmissionPolicyStatus"
    ),
    "admissionregistration.v1.ValidatingAdmissionPolicyBinding": (
        "1 metadata apis.meta.v1.ObjectMeta;"
        "2 spec admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec"
    ),
    "admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec": (
        "1 policyName string;2 paramRef admissionregistration.v1.ParamRef;"
        "3 matchResources admissionregistration.v1.MatchResources;4 validationActions []string"
    ),
    "admissionregistration.v1.ValidatingAdmissionPolicySpec": (
        "1 paramKind admissionregistration.v1.ParamKind;"
        "2 matchConstraints admissionregistration.v1.MatchResources;"
        "3 validations []admissionregistration.v1.Validation;4 failurePolicy *string;"
        "5 auditAnnotations []admissionregistration.v1.AuditAnnotation;"
        "6 matchConditions []admissionregistration.v1.MatchCondition;"
        "7 variables []admissionregistration.v1.Variable"
    ),
    "admissionregistration.v1.ValidatingAdmissionPolicyStatus": (
        "1 observedGeneration int64;2 typeChecking admissionregistration.v1.TypeChecking;"
        "3 conditions []apis.meta.v1.Condition"
    ),
    "admissionregistration.v1.ValidatingWebhook": (
        "1 name *string;2 clientConfig admissionregistration.v1.WebhookClientConfig;"
        "3 rules []admissionregistration.v1.RuleWithOperations;4 failurePolicy *string;"
        "5 namespaceSelector apis.meta.v1.LabelSelector;6 sideEffects *string;7 timeoutSeconds *int32;"
        "8 admissionReviewVersions []string;9 matchPolicy *string;"
        "10 objectSelector apis.meta.v1.LabelSelector;"
        "11 matchConditions []admissionregistration.v1.MatchCondition"
    ),
    "admissionregistration.v1.ValidatingWebhookConfiguration": (
        "1 metadata apis.meta.v1.ObjectMeta;2 webhooks []admissionregistration.v1.ValidatingWebhook"
    ),
    "admissionregistration.v1.Validation": (
        "1 expression *string;2 message string;3 reason *string;4 messageExpression string"
    ),
    "admissionregistration.v1.Variable": "1 name *string;2 expression *string",
    "admissionregistration.v1.WebhookClientConfig": (
        "1 service admissionregistration.v1.ServiceReference;2 caBundle bytes;3 url *string"
    ),
    "api.resource.Quantity": "1 string string",
    "apis.meta.v1.Condition": (
        "1 type *string;2 status *string;3 observedGeneration int64;4 lastTransitionTime apis.meta.v1.Time;"
        "5 reason *string;6 message *string"
    ),
    "apis.meta.v1.DeleteOptions": (
        "1 gracePeriodSeconds *int64;2 preconditions apis.meta.v1.Preconditions;3 orphanDependents *bool;"
        "4 propagationPolicy *string;5 dryRun []string;"
        "6 ignoreStoreReadErrorWithClusterBreakingPotential *bool"
    ),
    "apis.meta.v1.FieldSelectorRequirement": "1 key *string;2 operator *string;3 values []string",
    "apis.meta.v1.FieldsV1": "1 Raw *bytes",
    "apis.meta.v1.LabelSelector": "1 matchLabels map:string;2 matchExpressions []apis.meta.v1.LabelSelectorRequirement",
    "apis.meta.v1.LabelSelectorRequirement": "1 key *string;2 operator *string;3 values []string",
    "apis.meta.v1.ManagedFieldsEntry": (
        "1 manager string;2 operation string;3 apiVersion string;4 time apis.meta.v1.Time;"
        "6 fieldsType string;7 fieldsV1 apis.meta.v1.FieldsV1;8 subresource string"
    ),
    "apis.meta.v1.MicroTime": "1 seconds int64;2 nanos int32",
    "apis.meta.v1.ObjectMeta": (
        "1 name string;2 generateName string;3 namespace string;4 selfLink string;5 uid string;"
        "6 resourceVersion string;7 generation int64;8 creationTimestamp apis.meta.v1.Time;"
        "9 deletionTimestamp apis.meta.v1.Time;10 deletionGracePeriodSeconds *int64;11 labels map:string;"
        "12 annotations map:string;13 ownerReferences []apis.meta.v1.OwnerReference;14 finalizers []string;"
        "17 managedFields []apis.meta.v1.ManagedFieldsEntry"
    ),
    "apis.meta.v1.OwnerReference": (
        "1 kind *string;3 name *string;4 uid *string;5 apiVersion *string;6 controller *bool;"
        "7 blockOwnerDeletion *bool"
    ),
    "apis.meta.v1.Preconditions": "1 uid *string;2 resourceVersion *string",
    "apis.meta.v1.Time": "1 seconds int64;2 nanos int32",
    "apps.v1.ControllerRevision": "1 metadata apis.meta.v1.ObjectMeta;2 data runtime.RawExtension;3 revision *int64",
    "apps.v1.DaemonSet": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec apps.v1.DaemonSetSpec;3 status apps.v1.DaemonSetStatus"
    ),
    "apps.v1.DaemonSetCondition": (
        "1 type *string;2 status *string;3 lastTransitionTime apis.meta.v1.Time;4 reason string;"
        "5 message string"
    ),
    "apps.v1.DaemonSetSpec": (
        "1 selector apis.meta.v1.LabelSelector;2 template core.v1.PodTemplateSpec;"
        "3 updateStrategy apps.v1.DaemonSetUpdateStrategy;4 minReadySeconds int32;"
        "6 revisionHistoryLimit *int32"
    ),
    "apps.v1.DaemonSetStatus": (
        "1 currentNumberScheduled *int32;2 numberMisscheduled *int32;3 desiredNumberScheduled *int32;"
        "4 numberReady *int32;5 observedGeneration int64;6 updatedNumberScheduled int32;"
        "7 numberAvailable int32;8 numberUnavailable int32;9 collisionCount *int32;"
        "10 conditions []apps.v1.DaemonSetCondition"
    ),
    "apps.v1.DaemonSetUpdateStrategy": "1 type string;2 rollingUpdate apps.v1.RollingUpdateDaemonSet",
    "apps.v1.Deployment": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec apps.v1.DeploymentSpec;3 status apps.v1.DeploymentStatus"
    ),
    "apps.v1.DeploymentCondition": (
        "1 type *string;2 status *string;4 reason string;5 message string;6 lastUpdateTime apis.meta.v1.Time;"
        "7 lastTransitionTime apis.meta.v1.Time"
    ),
    "apps.v1.DeploymentSpec": (
        "1 replicas *int32;2 selector apis.meta.v1.LabelSelector;3 template core.v1.PodTemplateSpec;"
        "4 strategy apps.v1.DeploymentStrategy;5 minReadySeconds int32;6 revisionHistoryLimit *int32;"
        "7 paused bool;9 progressDeadlineSeconds *int32"
    ),
    "apps.v1.DeploymentStatus": (
        "1 observedGeneration int64;2 replicas int32;3 updatedReplicas int32;4 availableReplicas int32;"
        "5 unavailableReplicas int32;6 conditions []apps.v1.DeploymentCondition;7 readyReplicas int32;"
        "8 collisionCount *int32"
    ),
    "apps.v1.DeploymentStrategy": "1 type string;2 rollingUpdate apps.v1.RollingUpdateDeployment",
    "apps.v1.ReplicaSet": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec apps.v1.ReplicaSetSpec;3 status apps.v1.ReplicaSetStatus"
    ),
    "apps.v1.ReplicaSetCondition": (
        "1 type *string;2 status *string;3 lastTransitionTime apis.meta.v1.Time;4 reason string;"
        "5 message string"
    ),
    "apps.v1.ReplicaSetSpec": (
        "1 replicas *int32;2 selector apis.meta.v1.LabelSelector;3 template core.v1.PodTemplateSpec;"
        "4 minReadySeconds int32"
    ),
    "apps.v1.ReplicaSetStatus": (
        "1 replicas *int32;2 fullyLabeledReplicas int32;3 observedGeneration int64;4 readyReplicas int32;"
        "5 availableReplicas int32;6 conditions []apps.v1.ReplicaSetCondition"
    ),
    "apps.v1.RollingUpdateDaemonSet": "1 maxUnavailable util.intstr.IntOrString;2 maxSurge util.intstr.IntOrString",
    "apps.v1.RollingUpdateDeployment": "1 maxUnavailable util.intstr.IntOrString;2 maxSurge util.intstr.IntOrString",
    "apps.v1.RollingUpdateStatefulSetStrategy": "1 partition *int32;2 maxUnavailable util.intstr.IntOrString",
    "apps.v1.StatefulSet": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec apps.v1.StatefulSetSpec;3 status apps.v1.StatefulSetStatus"
    ),
    "apps.v1.StatefulSetCondition": (
        "1 type *string;2 status *string;3 lastTransitionTime apis.meta.v1.Time;4 reason string;"
        "5 message string"
    ),
    "apps.v1.StatefulSetOrdinals": "1 start *int32",
    "apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicy": "1 whenDeleted string;2 whenScaled string",
    "apps.v1.StatefulSetSpec": (
        "1 replicas *int32;2 selector apis.meta.v1.LabelSelector;3 template core.v1.PodTemplateSpec;"
        "4 volumeClaimTemplates []core.v1.PersistentVolumeClaim;5 serviceName *string;"
        "6 podManagementPolicy string;7 updateStrategy apps.v1.StatefulSetUpdateStrategy;"
        "8 revisionHistoryLimit *int32;9 minReadySeconds int32;"
        "10 persistentVolumeClaimRetentionPolicy apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicy;"
        "11 ordinals apps.v1.StatefulSetOrdinals"
    ),
    "apps.v1.StatefulSetStatus": (
        "1 observedGeneration int64;2 replicas *int32;3 readyReplicas int32;4 currentReplicas int32;"
        "5 updatedReplicas int32;6 currentRevision string;7 updateRevision string;9 collisionCount *int32;"
        "10 conditions []apps.v1.StatefulSetCondition;11 availableReplicas *int32"
    ),
    "apps.v1.StatefulSetUpdateStrategy": "1 type string;2 rollingUpdate apps.v1.RollingUpdateStatefulSetStrategy",
    "authentication.v1.BoundObjectReference": "1 kind string;2 apiVersion string;3 name string;4 uid string",
    "authentication.v1.ExtraValue": "1 items []string",
    "authentication.v1.SelfSubjectReview": (
        "1 metadata apis.meta.v1.ObjectMeta;2 status authentication.v1.SelfSubjectReviewStatus"
    ),
    "authentication.v1.SelfSubjectReviewStatus": "1 userInfo authentication.v1.UserInfo",
    "authentication.v1.TokenRequest": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec authentication.v1.TokenRequestSpec;"
        "3 status authentication.v1.TokenRequestStatus"
    ),
    "authentication.v1.TokenRequestSpec": (
        "1 audiences []string;3 boundObjectRef authentication.v1.BoundObjectReference;"
        "4 expirationSeconds *int64"
    ),
    "authentication.v1.TokenRequestStatus": "1 token *string;2 expirationTimestamp apis.meta.v1.Time",
    "authentication.v1.TokenReview": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec authentication.v1.TokenReviewSpec;"
        "3 status authentication.v1.TokenReviewStatus"
    ),
    "authentication.v1.TokenReviewSpec": "1 token string;2 audiences []string",
    "authentication.v1.TokenReviewStatus": (
        "1 authenticated bool;2 user authentication.v1.UserInfo;3 error string;4 audiences []string"
    ),
    "authentication.v1.UserInfo": (
        "1 username string;2 uid string;3 groups []string;4 extra map:authentication.v1.ExtraValue"
    ),
    "authorization.v1.ExtraValue": "1 items []string",
    "authorization.v1.FieldSelectorAttributes": (
        "1 rawSelector string;2 requirements []apis.meta.v1.FieldSelectorRequirement"
    ),
    "authorization.v1.LabelSelectorAttributes": (
        "1 rawSelector string;2 requirements []apis.meta.v1.LabelSelectorRequirement"
    ),
    "authorization.v1.LocalSubjectAccessReview": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec authorization.v1.SubjectAccessReviewSpec;"
        "3 status authorization.v1.SubjectAccessReviewStatus"
    ),
    "authorization.v1.NonResourceAttributes": "1 path string;2 verb string",
    "authorization.v1.NonResourceRule": "1 verbs []string;2 nonResourceURLs []string",
    "authorization.v1.ResourceAttributes": (
        "1 namespace string;2 verb string;3 group string;4 version string;5 resource string;"
        "6 subresource string;7 name string;8 fieldSelector authorization.v1.FieldSelectorAttributes;"
        "9 labelSelector authorization.v1.LabelSelectorAttributes"
    ),
    "authorization.v1.ResourceRule": (
        "1 verbs []string;2 apiGroups []string;3 resources []string;4 resourceNames []string"
    ),
    "authorization.v1.SelfSubjectAccessReview": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec authorization.v1.SelfSubjectAccessReviewSpec;"
        "3 status authorization.v1.SubjectAccessReviewStatus"
    ),
    "authorization.v1.SelfSubjectAccessReviewSpec": (
        "1 resourceAttributes authorization.v1.ResourceAttributes;"
        "2 nonResourceAttributes authorization.v1.NonResourceAttributes"
    ),
    "authorization.v1.SelfSubjectRulesReview": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec authorization.v1.SelfSubjectRulesReviewSpec;"
        "3 status authorization.v1.SubjectRulesReviewStatus"
    ),
    "authorization.v1.SelfSubjectRulesReviewSpec": "1 namespace string",
    "authorization.v1.SubjectAccessReview": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec authorization.v1.SubjectAccessReviewSpec;"
        "3 status authorization.v1.SubjectAccessReviewStatus"
    ),
    "authorization.v1.SubjectAccessReviewSpec": (
        "1 resourceAttributes authorization.v1.ResourceAttributes;"
        "2 nonResourceAttributes authorization.v1.NonResourceAttributes;3 user string;4 groups []string;"
        "5 extra map:authorization.v1.ExtraValue;6 uid string"
    ),
    "authorization.v1.SubjectAccessReviewStatus": (
        "1 allowed *bool;2 reason string;3 evaluationError string;4 denied bool"
    ),
    "authorization.v1.SubjectRulesReviewStatus": (
        "1 resourceRules []authorization.v1.ResourceRule;"
        "2 nonResourceRules []authorization.v1.NonResourceRule;3 incomplete *bool;4 evaluationError string"
    ),
    "autoscaling.v1.CrossVersionObjectReference": "1 kind *string;2 name *string;3 apiVersion string",
    "autoscaling.v1.HorizontalPodAutoscaler": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec autoscaling.v1.HorizontalPodAutoscalerSpec;"
        "3 status autoscaling.v1.HorizontalPodAutoscalerStatus"
    ),
    "autoscaling.v1.HorizontalPodAutoscalerSpec": (
        "1 scaleTargetRef autoscaling.v1.CrossVersionObjectReference;2 minReplicas *int32;"
        "3 maxReplicas *int32;4 targetCPUUtilizationPercentage *int32"
    ),
    "autoscaling.v1.HorizontalPodAutoscalerStatus": (
        "1 observedGeneration *int64;2 lastScaleTime apis.meta.v1.Time;3 currentReplicas *int32;"
        "4 desiredReplicas *int32;5 currentCPUUtilizationPercentage *int32"
    ),
    "autoscaling.v1.Scale": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec autoscaling.v1.ScaleSpec;"
        "3 status autoscaling.v1.ScaleStatus"
    ),
    "autoscaling.v1.ScaleSpec": "1 replicas int32",
    "autoscaling.v1.ScaleStatus": "1 replicas *int32;2 selector string",
    "autoscaling.v2.ContainerResourceMetricSource": (
        "1 name *string;2 target autoscaling.v2.MetricTarget;3 container *string"
    ),
    "autoscaling.v2.ContainerResourceMetricStatus": (
        "1 name *string;2 current autoscaling.v2.MetricValueStatus;3 container *string"
    ),
    "autoscaling.v2.CrossVersionObjectReference": "1 kind *string;2 name *string;3 apiVersion string",
    "autoscaling.v2.ExternalMetricSource": (
        "1 metric autoscaling.v2.MetricIdentifier;2 target autoscaling.v2.MetricTarget"
    ),
    "autoscaling.v2.ExternalMetricStatus": (
        "1 metric autoscaling.v2.MetricIdentifier;2 current autoscaling.v2.MetricValueStatus"
    ),
    "autoscaling.v2.HPAScalingPolicy": "1 type *string;2 value *int32;3 periodSeconds *int32",
    "autoscaling.v2.HPAScalingRules": (
        "1 selectPolicy *string;2 policies []autoscaling.v2.HPAScalingPolicy;"
        "3 stabilizationWindowSeconds *int32"
    ),
    "autoscaling.v2.HorizontalPodAutoscaler": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec autoscaling.v2.HorizontalPodAutoscalerSpec;"
        "3 status autoscaling.v2.HorizontalPodAutoscalerStatus"
    ),
    "autoscaling.v2.HorizontalPodAutoscalerBehavior": (
        "1 scaleUp autoscaling.v2.HPAScalingRules;2 scaleDown autoscaling.v2.HPAScalingRules"
    ),
    "autoscaling.v2.HorizontalPodAutoscalerCondition": (
        "1 type *string;2 status *string;3 lastTransitionTime apis.meta.v1.Time;4 reason string;"
        "5 message string"
    ),
    "autoscaling.v2.HorizontalPodAutoscalerSpec": (
        "1 scaleTargetRef autoscaling.v2.CrossVersionObjectReference;2 minReplicas *int32;"
        "3 maxReplicas *int32;4 metrics []autoscaling.v2.MetricSpec;"
        "5 behavior autoscaling.v2.HorizontalPodAutoscalerBehavior"
    ),
    "autoscaling.v2.HorizontalPodAutoscalerStatus": (
        "1 observedGeneration *int64;2 lastScaleTime apis.meta.v1.Time;3 currentReplicas int32;"
        "4 desiredReplicas *int32;5 currentMetrics []autoscaling.v2.MetricStatus;"
        "6 conditions []autoscaling.v2.HorizontalPodAutoscalerCondition"
    ),
    "autoscaling.v2.MetricIdentifier": "1 name *string;2 selector apis.meta.v1.LabelSelector",
    "autoscaling.v2.MetricSpec": (
        "1 type *string;2 object autoscaling.v2.ObjectMetricSource;3 pods autoscaling.v2.PodsMetricSource;"
        "4 resource autoscaling.v2.ResourceMetricSource;5 external autoscaling.v2.ExternalMetricSource;"
        "7 containerResource autoscaling.v2.ContainerResourceMetricSource"
    ),
    "autoscaling.v2.MetricStatus": (
        "1 type *string;2 object autoscaling.v2.ObjectMetricStatus;3 pods autoscaling.v2.PodsMetricStatus;"
        "4 resource autoscaling.v2.ResourceMetricStatus;5 external autoscaling.v2.ExternalMetricStatus;"
        "7 containerResource autoscaling.v2.ContainerResourceMetricStatus"
    ),
    "autoscaling.v2.MetricTarget": (
        "1 type *string;2 value api.resource.Quantity;3 averageValue api.resource.Quantity;"
        "4 averageUtilization *int32"
    ),
    "autoscaling.v2.MetricValueStatus": (
        "1 value api.resource.Quantity;2 averageValue api.resource.Quantity;3 averageUtilization *int32"
    ),
    "autoscaling.v2.ObjectMetricSource": (
        "1 describedObject autoscaling.v2.CrossVersionObjectReference;2 target autoscaling.v2.MetricTarget;"
        "3 metric autoscaling.v2.MetricIdentifier"
    ),
    "autoscaling.v2.ObjectMetricStatus": (
        "1 metric autoscaling.v2.MetricIdentifier;2 current autoscaling.v2.MetricValueStatus;"
        "3 describedObject autoscaling.v2.CrossVersionObjectReference"
    ),
    "autoscaling.v2.PodsMetricSource": "1 metric autoscaling.v2.MetricIdentifier;2 target autoscaling.v2.MetricTarget",
    "autoscaling.v2.PodsMetricStatus": (
        "1 metric autoscaling.v2.MetricIdentifier;2 current autoscaling.v2.MetricValueStatus"
    ),
    "autoscaling.v2.ResourceMetricSource": "1 name *string;2 target autoscaling.v2.MetricTarget",
    "autoscaling.v2.ResourceMetricStatus": "1 name *string;2 current autoscaling.v2.MetricValueStatus",
    "batch.v1.CronJob": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec batch.v1.CronJobSpec;3 status batch.v1.CronJobStatus"
    ),
    "batch.v1.CronJobSpec": (
        "1 schedule *string;2 startingDeadlineSeconds *int64;3 concurrencyPolicy string;4 suspend *bool;"
        "5 jobTemplate batch.v1.JobTemplateSpec;6 successfulJobsHistoryLimit *int32;"
        "7 failedJobsHistoryLimit *int32;8 timeZone *string"
    ),
    "batch.v1.CronJobStatus": (
        "1 active []core.v1.ObjectReference;4 lastScheduleTime apis.meta.v1.Time;"
        "5 lastSuccessfulTime apis.meta.v1.Time"
    ),
    "batch.v1.Job": "1 metadata apis.meta.v1.ObjectMeta;2 spec batch.v1.JobSpec;3 status batch.v1.JobStatus",
    "batch.v1.JobCondition": (
        "1 type *string;2 status *string;3 lastProbeTime apis.meta.v1.Time;"
        "4 lastTransitionTime apis.meta.v1.Time;5 reason string;6 message string"
    ),
    "batch.v1.JobSpec": (
        "1 parallelism *int32;2 completions *int32;3 activeDeadlineSeconds *int64;"
        "4 selector apis.meta.v1.LabelSelector;5 manualSelector *bool;6 template core.v1.PodTemplateSpec;"
        "7 backoffLimit *int32;8 ttlSecondsAfterFinished *int32;9 completionMode *string;10 suspend *bool;"
        "11 podFailurePolicy batch.v1.PodFailurePolicy;12 backoffLimitPerIndex *int32;"
        "13 maxFailedIndexes *int32;14 podReplacementPolicy *string;15 managedBy *string;"
        "16 successPolicy batch.v1.SuccessPolicy"
    ),
    "batch.v1.JobStatus": (
        "1 conditions []batch.v1.JobCondition;2 startTime apis.meta.v1.Time;"
        "3 completionTime apis.meta.v1.Time;4 active int32;5 succeeded int32;6 failed int32;"
        "7 completedIndexes string;8 uncountedTerminatedPods batch.v1.UncountedTerminatedPods;9 ready *int32;"
        "10 failedIndexes *string;11 terminating *int32"
    ),
    "batch.v1.JobTemplateSpec": "1 metadata apis.meta.v1.ObjectMeta;2 spec batch.v1.JobSpec",
    "batch.v1.PodFailurePolicy": "1 rules []batch.v1.PodFailurePolicyRule",
    "batch.v1.PodFailurePolicyOnExitCodesRequirement": "1 containerName *string;2 operator *string;3 values []int32",
    "batch.v1.PodFailurePolicyOnPodConditionsPattern": "1 type *string;2 status *string",
    "batch.v1.PodFailurePolicyRule": (
        "1 action *string;2 onExitCodes batch.v1.PodFailurePolicyOnExitCodesRequirement;"
        "3 onPodConditions []batch.v1.PodFailurePolicyOnPodConditionsPattern"
    ),
    "batch.v1.SuccessPolicy": "1 rules []batch.v1.SuccessPolicyRule",
    "batch.v1.SuccessPolicyRule": "1 succeededIndexes *string;2 succeededCount *int32",
    "batch.v1.UncountedTerminatedPods": "1 succeeded []string;2 failed []string",
    "certificates.v1.CertificateSigningRequest": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec certificates.v1.CertificateSigningRequestSpec;"
        "3 status certificates.v1.CertificateSigningRequestStatus"
    ),
    "certificates.v1.CertificateSigningRequestCondition": (
        "1 type *string;2 reason string;3 message string;4 lastUpdateTime apis.meta.v1.Time;"
        "5 lastTransitionTime apis.meta.v1.Time;6 status *string"
    ),
    "certificates.v1.CertificateSigningRequestSpec": (
        "1 request *bytes;2 username string;3 uid string;4 groups []string;5 usages []string;"
        "6 extra map:certificates.v1.ExtraValue;7 signerName *string;8 expirationSeconds *int32"
    ),
    "certificates.v1.CertificateSigningRequestStatus": (
        "1 conditions []certificates.v1.CertificateSigningRequestCondition;2 certificate bytes"
    ),
    "certificates.v1.ExtraValue": "1 items []string",
    "coordination.v1.Lease": "1 metadata apis.meta.v1.ObjectMeta;2 spec coordination.v1.LeaseSpec",
    "coordination.v1.LeaseSpec": (
        "1 holderIdentity *string;2 leaseDurationSeconds *int32;3 acquireTime apis.meta.v1.MicroTime;"
        "4 renewTime apis.meta.v1.MicroTime;5 leaseTransitions *int32;6 strategy *string;"
        "7 preferredHolder *string"
    ),
    "core.v1.AWSElasticBlockStoreVolumeSource": "1 volumeID *string;2 fsType string;3 partition int32;4 readOnly bool",
    "core.v1.Affinity": (
        "1 nodeAffinity core.v1.NodeAffinity;2 podAffinity core.v1.PodAffinity;"
        "3 podAntiAffinity core.v1.PodAntiAffinity"
    ),
    "core.v1.AppArmorProfile": "1 type *string;2 localhostProfile *string",
    "core.v1.AttachedVolume": "1 name *string;2 devicePath *string",
    "core.v1.AzureDiskVolumeSource": (
        "1 diskName *string;2 diskURI *string;3 cachingMode *string;4 fsType *string;5 readOnly *bool;"
        "6 kind *string"
    ),
    "core.v1.AzureFilePersistentVolumeSource": (
        "1 secretName *string;2 shareName *string;3 readOnly bool;4 secretNamespace *string"
    ),
    "core.v1.AzureFileVolumeSource": "1 secretName *string;2 shareName *string;3 readOnly bool",
    "core.v1.Binding": "1 metadata apis.meta.v1.ObjectMeta;2 target core.v1.ObjectReference",
    "core.v1.CSIPersistentVolumeSource": (
        "1 driver *string;2 volumeHandle *string;3 readOnly bool;4 fsType string;"
        "5 volumeAttributes map:string;6 controllerPublishSecretRef core.v1.SecretReference;"
        "7 nodeStageSecretRef core.v1.SecretReference;8 nodePublishSecretRef core.v1.SecretReference;"
        "9 controllerExpandSecretRef core.v1.SecretReference;10 nodeExpandSecretRef core.v1.SecretReference"
    ),
    "core.v1.CSIVolumeSource": (
        "1 driver *string;2 readOnly *bool;3 fsType *string;4 volumeAttributes map:string;"
        "5 nodePublishSecretRef core.v1.LocalObjectReference"
    ),
    "core.v1.Capabilities": "1 add []string;2 drop []string",
    "core.v1.CephFSPersistentVolumeSource": (
        "1 monitors []string;2 path string;3 user string;4 secretFile string;"
        "5 secretRef core.v1.SecretReference;6 readOnly bool"
    ),
    "core.v1.CephFSVolumeSource": (
        "1 monitors []string;2 path string;3 user string;4 secretFile string;"
        "5 secretRef core.v1.LocalObjectReference;6 readOnly bool"
    ),
    "core.v1.CinderPersistentVolumeSource": (
        "1 volumeID *string;2 fsType string;3 readOnly bool;4 secretRef core.v1.SecretReference"
    ),
    "core.v1.CinderVolumeSource": (
        "1 volumeID *string;2 fsType string;3 readOnly bool;4 secretRef core.v1.LocalObjectReference"
    ),
    "core.v1.ClientIPConfig": "1 timeoutSeconds *int32",
    "core.v1.ClusterTrustBundleProjection": (
        "1 name *string;2 signerName *string;3 labelSelector apis.meta.v1.LabelSelector;4 path *string;"
        "5 optional *bool"
    ),
    "core.v1.ConfigMap": (
        "1 metadata apis.meta.v1.ObjectMeta;2 data map:string;3 binaryData map:bytes;4 immutable *bool"
    ),
    "core.v1.ConfigMapEnvSource": "1  core.v1.LocalObjectReference;2 optional *bool",
    "core.v1.ConfigMapKeySelector": "1  core.v1.LocalObjectReference;2 key *string;3 optional *bool",
    "core.v1.ConfigMapNodeConfigSource": (
        "1 namespace *string;2 name *string;3 uid string;4 resourceVersion string;5 kubeletConfigKey *string"
    ),
    "core.v1.ConfigMapProjection": "1  core.v1.LocalObjectReference;2 items []core.v1.KeyToPath;4 optional *bool",
    "core.v1.ConfigMapVolumeSource": (
        "1  core.v1.LocalObjectReference;2 items []core.v1.KeyToPath;3 defaultMode *int32;4 optional *bool"
    ),
    "core.v1.Container": (
        "1 name *string;2 image string;3 command []string;4 args []string;5 workingDir string;"
        "6 ports []core.v1.ContainerPort;7 env []core.v1.EnvVar;8 resources core.v1.ResourceRequirements;"
        "9 volumeMounts []core.v1.VolumeMount;10 livenessProbe core.v1.Probe;11 readinessProbe core.v1.Probe;"
        "12 lifecycle core.v1.Lifecycle;13 terminationMessagePath string;14 imagePullPolicy string;"
        "15 securityContext core.v1.SecurityContext;16 stdin bool;17 stdinOnce bool;18 tty bool;"
        "19 envFrom []core.v1.EnvFromSource;20 terminationMessagePolicy string;"
        "21 volumeDevices []core.v1.VolumeDevice;22 startupProbe core.v1.Probe;"
        "23 resizePolicy []core.v1.ContainerResizePolicy;24 restartPolicy *string"
    ),
    "core.v1.ContainerImage": "1 names []string;2 sizeBytes int64",
    "core.v1.ContainerPort": "1 name string;2 hostPort int32;3 containerPort *int32;4 protocol string;5 hostIP string",
    "core.v1.ContainerResizePolicy": "1 resourceName *string;2 restartPolicy *string",
    "core.v1.ContainerState": (
        "1 waiting core.v1.ContainerStateWaiting;2 running core.v1.ContainerStateRunning;"
        "3 terminated core.v1.ContainerStateTerminated"
    ),
    "core.v1.ContainerStateRunning": "1 startedAt apis.meta.v1.Time",
    "core.v1.ContainerStateTerminated": (
        "1 exitCode *int32;2 signal int32;3 reason string;4 message string;5 startedAt apis.meta.v1.Time;"
        "6 finishedAt apis.meta.v1.Time;7 containerID string"
    ),
    "core.v1.ContainerStateWaiting": "1 reason string;2 message string",
    "core.v1.ContainerStatus": (
        "1 name *string;2 state core.v1.ContainerState;3 lastState core.v1.ContainerState;4 ready *bool;"
        "5 restartCount *int32;6 image *string;7 imageID *string;8 containerID string;9 started *bool;"
        "10 allocatedResources map:api.resource.Quantity;11 resources core.v1.ResourceRequirements;"
        "12 volumeMounts []core.v1.VolumeMountStatus;13 user core.v1.ContainerUser;"
        "14 allocatedResourcesStatus []core.v1.ResourceStatus"
    ),
    "core.v1.ContainerUser": "1 linux core.v1.LinuxContainerUser",
    "core.v1.DaemonEndpoint": "1 Port *int32",
    "core.v1.DownwardAPIProjection": "1 items []core.v1.DownwardAPIVolumeFile",
    "core.v1.DownwardAPIVolumeFile": (
        "1 path *string;2 fieldRef core.v1.ObjectFieldSelector;"
        "3 resourceFieldRef core.v1.ResourceFieldSelector;4 mode *int32"
    ),
    "core.v1.DownwardAPIVolumeSource": "1 items []core.v1.DownwardAPIVolumeFile;2 defaultMode *int32",
    "core.v1.EmptyDirVolumeSource": "1 medium string;2 sizeLimit api.resource.Quantity",
    "core.v1.EndpointAddress": "1 ip *string;2 targetRef core.v1.ObjectReference;3 hostname string;4 nodeName *string",
    "core.v1.EndpointPort": "1 name string;2 port *int32;3 protocol string;4 appProtocol *string",
    "core.v1.EndpointSubset": (
        "1 addresses []core.v1.EndpointAddress;2 notReadyAddresses []core.v1.EndpointAddress;"
        "3 ports []core.v1.EndpointPort"
    ),
    "core.v1.Endpoints": "1 metadata apis.meta.v1.ObjectMeta;2 subsets []core.v1.EndpointSubset",
    "core.v1.EnvFromSource": (
        "1 prefix string;2 configMapRef core.v1.ConfigMapEnvSource;3 secretRef core.v1.SecretEnvSource"
    ),
    "core.v1.EnvVar": "1 name *string;2 value string;3 valueFrom core.v1.EnvVarSource",
    "core.v1.EnvVarSource": (
        "1 fieldRef core.v1.ObjectFieldSelector;2 resourceFieldRef core.v1.ResourceFieldSelector;"
        "3 configMapKeyRef core.v1.ConfigMapKeySelector;4 secretKeyRef core.v1.SecretKeySelector"
    ),
    "core.v1.EphemeralContainer": "1  core.v1.EphemeralContainerCommon;2 targetContainerName string",
    "core.v1.EphemeralContainerCommon": (
        "1 name *string;2 image string;3 command []string;4 args []string;5 workingDir string;"
        "6 ports []core.v1.ContainerPort;7 env []core.v1.EnvVar;8 resources core.v1.ResourceRequirements;"
        "9 volumeMounts []core.v1.VolumeMount;10 livenessProbe core.v1.Probe;11 readinessProbe core.v1.Probe;"
        "12 lifecycle core.v1.Lifecycle;13 terminationMessagePath string;14 imagePullPolicy string;"
        "15 securityContext core.v1.SecurityContext;16 stdin bool;17 stdinOnce bool;18 tty bool;"
        "19 envFrom []core.v1.EnvFromSource;20 terminationMessagePolicy string;"
        "21 volumeDevices []core.v1.VolumeDevice;22 startupProbe core.v1.Probe;"
        "23 resizePolicy []core.v1.ContainerResizePolicy;24 restartPolicy *string"
    ),
    "core.v1.EphemeralVolumeSource": "1 volumeClaimTemplate core.v1.PersistentVolumeClaimTemplate",
    "core.v1.Event": (
        "1 metadata apis.meta.v1.ObjectMeta;2 involvedObject core.v1.ObjectReference;3 reason string;"
        "4 message string;5 source core.v1.EventSource;6 firstTimestamp apis.meta.v1.Time;"
        "7 lastTimestamp apis.meta.v1.Time;8 count int32;9 type string;10 eventTime apis.meta.v1.MicroTime;"
        "11 series core.v1.EventSeries;12 action string;13 related core.v1.ObjectReference;"
        "14 reportingComponent *string;15 reportingInstance *string"
    ),
    "core.v1.EventSeries": "1 count int32;2 lastObservedTime apis.meta.v1.MicroTime",
    "core.v1.EventSource": "1 component string;2 host string",
    "core.v1.ExecAction": "1 command []string",
    "core.v1.FCVolumeSource": "1 targetWWNs []string;2 lun *int32;3 fsType string;4 readOnly bool;5 wwids []string",
    "core.v1.FlexPersistentVolumeSource": (
        "1 driver *string;2 fsType string;3 secretRef core.v1.SecretReference;4 readOnly bool;"
        "5 options map:string"
    ),
    "core.v1.FlexVolumeSource": (
        "1 driver *string;2 fsType string;3 secretRef core.v1.LocalObjectReference;4 readOnly bool;"
        "5 options map:string"
    ),
    "core.v1.FlockerVolumeSource": "1 datasetName string;2 datasetUUID string",
    "core.v1.GCEPersistentDiskVolumeSource": "1 pdName *string;2 fsType string;3 partition int32;4 readOnly bool",
    "core.v1.GRPCAction": "1 port *int32;2 service *string",
    "core.v1.GitRepoVolumeSource": "1 repository *string;2 revision string;3 directory string",
    "core.v1.GlusterfsPersistentVolumeSource": (
        "1 endpoints *string;2 path *string;3 readOnly bool;4 endpointsNamespace *string"
    ),
    "core.v1.GlusterfsVolumeSource": "1 endpoints *string;2 path *string;3 readOnly bool",
    "core.v1.HTTPGetAction": (
        "1 path string;2 port util.intstr.IntOrString;3 host string;4 scheme string;"
        "5 httpHeaders []core.v1.HTTPHeader"
    ),
    "core.v1.HTTPHeader": "1 name *string;2 value *string",
    "core.v1.HostAlias": "1 ip *string;2 hostnames []string",
    "core.v1.HostIP": "1 ip *string",
    "core.v1.HostPathVolumeSource": "1 path *string;2 type *string",
    "core.v1.ISCSIPersistentVolumeSource": (
        "1 targetPortal *string;2 iqn *string;3 lun *int32;4 iscsiInterface string;5 fsType string;"
        "6 readOnly bool;7 portals []string;8 chapAuthDiscovery bool;10 secretRef core.v1.SecretReference;"
        "11 chapAuthSession bool;12 initiatorName *string"
    ),
    "core.v1.ISCSIVolumeSource": (
        "1 targetPortal *string;2 iqn *string;3 lun *int32;4 iscsiInterface string;5 fsType string;"
        "6 readOnly bool;7 portals []string;8 chapAuthDiscovery bool;"
        "10 secretRef core.v1.LocalObjectReference;11 chapAuthSession bool;12 initiatorName *string"
    ),
    "core.v1.ImageVolumeSource": "1 reference string;2 pullPolicy string",
    "core.v1.KeyToPath": "1 key *string;2 path *string;3 mode *int32",
    "core.v1.Lifecycle": "1 postStart core.v1.LifecycleHandler;2 preStop core.v1.LifecycleHandler",
    "core.v1.LifecycleHandler": (
        "1 exec core.v1.ExecAction;2 httpGet core.v1.HTTPGetAction;3 tcpSocket core.v1.TCPSocketAction;"
        "4 sleep core.v1.SleepAction"
    ),
    "core.v1.LimitRange": "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.LimitRangeSpec",
    "core.v1.LimitRangeItem": (
        "1 type *string;2 max map:api.resource.Quantity;3 min map:api.resource.Quantity;"
        "4 default map:api.resource.Quantity;5 defaultRequest map:api.resource.Quantity;"
        "6 maxLimitRequestRatio map:api.resource.Quantity"
    ),
    "core.v1.LimitRangeSpec": "1 limits []core.v1.LimitRangeItem",
    "core.v1.LinuxContainerUser": "1 uid *int64;2 gid *int64;3 supplementalGroups []int64",
    "core.v1.LoadBalancerIngress": "1 ip string;2 hostname string;3 ipMode *string;4 ports []core.v1.PortStatus",
    "core.v1.LoadBalancerStatus": "1 ingress []core.v1.LoadBalancerIngress",
    "core.v1.LocalObjectReference": "1 name string",
    "core.v1.LocalVolumeSource": "1 path *string;2 fsType *string",
    "core.v1.ModifyVolumeStatus": "1 targetVolumeAttributesClassName string;2 status *string",
    "core.v1.NFSVolumeSource": "1 server *string;2 path *string;3 readOnly bool",
    "core.v1.Namespace": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.NamespaceSpec;3 status core.v1.NamespaceStatus"
    ),
    "core.v1.NamespaceCondition": (
        "1 type *string;2 status *string;4 lastTransitionTime apis.meta.v1.Time;5 reason string;"
        "6 message string"
    ),
    "core.v1.NamespaceSpec": "1 finalizers []string",
    "core.v1.NamespaceStatus": "1 phase string;2 conditions []core.v1.NamespaceCondition",
    "core.v1.Node": "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.NodeSpec;3 status core.v1.NodeStatus",
    "core.v1.NodeAddress": "1 type *string;2 address *string",
    "core.v1.NodeAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution core.v1.NodeSelector;"
        "2 preferredDuringSchedulingIgnoredDuringExecution []core.v1.PreferredSchedulingTerm"
    ),
    "core.v1.NodeCondition": (
        "1 type *string;2 status *string;3 lastHeartbeatTime apis.meta.v1.Time;"
        "4 lastTransitionTime apis.meta.v1.Time;5 reason string;6 message string"
    ),
    "core.v1.NodeConfigSource": "2 configMap core.v1.ConfigMapNodeConfigSource",
    "core.v1.NodeConfigStatus": (
        "1 assigned core.v1.NodeConfigSource;2 active core.v1.NodeConfigSource;"
        "3 lastKnownGood core.v1.NodeConfigSource;4 error string"
    ),
    "core.v1.NodeDaemonEndpoints": "1 kubeletEndpoint core.v1.DaemonEndpoint",
    "core.v1.NodeFeatures": "1 supplementalGroupsPolicy *bool",
    "core.v1.NodeRuntimeHandler": "1 name *string;2 features core.v1.NodeRuntimeHandlerFeatures",
    "core.v1.NodeRuntimeHandlerFeatures": "1 recursiveReadOnlyMounts *bool;2 userNamespaces *bool",
    "core.v1.NodeSelector": "1 nodeSelectorTerms []core.v1.NodeSelectorTerm",
    "core.v1.NodeSelectorRequirement": "1 key *string;2 operator *string;3 values []string",
    "core.v1.NodeSelectorTerm": (
        "1 matchExpressions []core.v1.NodeSelectorRequirement;2 matchFields []core.v1.NodeSelectorRequirement"
    ),
    "core.v1.NodeSpec": (
        "1 podCIDR string;2 externalID string;3 providerID string;4 unschedulable bool;"
        "5 taints []core.v1.Taint;6 configSource core.v1.NodeConfigSource;7 podCIDRs []string"
    ),
    "core.v1.NodeStatus": (
        "1 capacity map:api.resource.Quantity;2 allocatable map:api.resource.Quantity;3 phase string;"
        "4 conditions []core.v1.NodeCondition;5 addresses []core.v1.NodeAddress;"
        "6 daemonEndpoints core.v1.NodeDaemonEndpoints;7 nodeInfo core.v1.NodeSystemInfo;"
        "8 images []core.v1.ContainerImage;9 volumesInUse []string;"
        "10 volumesAttached []core.v1.AttachedVolume;11 config core.v1.NodeConfigStatus;"
        "12 runtimeHandlers []core.v1.NodeRuntimeHandler;13 features core.v1.NodeFeatures"
    ),
    "core.v1.NodeSystemInfo": (
        "1 machineID *string;2 systemUUID *string;3 bootID *string;4 kernelVersion *string;5 osImage *string;"
        "6 containerRuntimeVersion *string;7 kubeletVersion *string;8 kubeProxyVersion *string;"
        "9 operatingSystem *string;10 architecture *string"
    ),
    "core.v1.ObjectFieldSelector": "1 apiVersion string;2 fieldPath *string",
    "core.v1.ObjectReference": (
        "1 kind string;2 namespace string;3 name string;4 uid string;5 apiVersion string;"
        "6 resourceVersion string;7 fieldPath string"
    ),
    "core.v1.PersistentVolume": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.PersistentVolumeSpec;"
        "3 status core.v1.PersistentVolumeStatus"
    ),
    "core.v1.PersistentVolumeClaim": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.PersistentVolumeClaimSpec;"
        "3 status core.v1.PersistentVolumeClaimStatus"
    ),
    "core.v1.PersistentVolumeClaimCondition": (
        "1 type *string;2 status *string;3 lastProbeTime apis.meta.v1.Time;"
        "4 lastTransitionTime apis.meta.v1.Time;5 reason string;6 message string"
    ),
    "core.v1.PersistentVolumeClaimSpec": (
        "1 accessModes []string;2 resources core.v1.VolumeResourceRequirements;3 volumeName string;"
        "4 selector apis.meta.v1.LabelSelector;5 storageClassName *string;6 volumeMode *string;"
        "7 dataSource core.v1.TypedLocalObjectReference;8 dataSourceRef core.v1.TypedObjectReference;"
        "9 volumeAttributesClassName *string"
    ),
    "core.v1.PersistentVolumeClaimStatus": (
        "1 phase string;2 accessModes []string;3 capacity map:api.resource.Quantity;"
        "4 conditions []core.v1.PersistentVolumeClaimCondition;"
        "5 allocatedResources map:api.resource.Quantity;7 allocatedResourceStatuses map:string;"
        "8 currentVolumeAttributesClassName *string;9 modifyVolumeStatus core.v1.ModifyVolumeStatus"
    ),
    "core.v1.PersistentVolumeClaimTemplate": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.PersistentVolumeClaimSpec"
    ),
    "core.v1.PersistentVolumeClaimVolumeSource": "1 claimName *string;2 readOnly bool",
    "core.v1.PersistentVolumeSource": (
        "1 gcePersistentDisk core.v1.GCEPersistentDiskVolumeSource;"
        "2 awsElasticBlockStore core.v1.AWSElasticBlockStoreVolumeSource;"
        "3 hostPath core.v1.HostPathVolumeSource;4 glusterfs core.v1.GlusterfsPersistentVolumeSource;"
        "5 nfs core.v1.NFSVolumeSource;6 rbd core.v1.RBDPersistentVolumeSource;"
        "7 iscsi core.v1.ISCSIPersistentVolumeSource;8 cinder core.v1.CinderPersistentVolumeSource;"
        "9 cephfs core.v1.CephFSPersistentVolumeSource;10 fc core.v1.FCVolumeSource;"
        "11 flocker core.v1.FlockerVolumeSource;12 flexVolume core.v1.FlexPersistentVolumeSource;"
        "13 azureFile core.v1.AzureFilePersistentVolumeSource;"
        "14 vsphereVolume core.v1.VsphereVirtualDiskVolumeSource;15 quobyte core.v1.QuobyteVolumeSource;"
        "16 azureDisk core.v1.AzureDiskVolumeSource;"
        "17 photonPersistentDisk core.v1.PhotonPersistentDiskVolumeSource;"
        "18 portworxVolume core.v1.PortworxVolumeSource;19 scaleIO core.v1.ScaleIOPersistentVolumeSource;"
        "20 local core.v1.LocalVolumeSource;21 storageos core.v1.StorageOSPersistentVolumeSource;"
        "22 csi core.v1.CSIPersistentVolumeSource"
    ),
    "core.v1.PersistentVolumeSpec": (
        "1 capacity map:api.resource.Quantity;2  core.v1.PersistentVolumeSource;3 accessModes []string;"
        "4 claimRef core.v1.ObjectReference;5 persistentVolumeReclaimPolicy string;6 storageClassName string;"
        "7 mountOptions []string;8 volumeMode *string;9 nodeAffinity core.v1.VolumeNodeAffinity;"
        "10 volumeAttributesClassName *string"
    ),
    "core.v1.PersistentVolumeStatus": (
        "1 phase string;2 message string;3 reason string;4 lastPhaseTransitionTime apis.meta.v1.Time"
    ),
    "core.v1.PhotonPersistentDiskVolumeSource": "1 pdID *string;2 fsType string",
    "core.v1.Pod": "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.PodSpec;3 status core.v1.PodStatus",
    "core.v1.PodAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution []core.v1.PodAffinityTerm;"
        "2 preferredDuringSchedulingIgnoredDuringExecution []core.v1.WeightedPodAffinityTerm"
    ),
    "core.v1.PodAffinityTerm": (
        "1 labelSelector apis.meta.v1.LabelSelector;2 namespaces []string;3 topologyKey *string;"
        "4 namespaceSelector apis.meta.v1.LabelSelector;5 matchLabelKeys []string;"
        "6 mismatchLabelKeys []string"
    ),
    "core.v1.PodAntiAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution []core.v1.PodAffinityTerm;"
        "2 preferredDuringSchedulingIgnoredDuringExecution []core.v1.WeightedPodAffinityTerm"
    ),
    "core.v1.PodCondition": (
        "1 type *string;2 status *string;3 lastProbeTime apis.meta.v1.Time;"
        "4 lastTransitionTime apis.meta.v1.Time;5 reason string;6 message string"
    ),
    "core.v1.PodDNSConfig": "1 nameservers []string;2 searches []string;3 options []core.v1.PodDNSConfigOption",
    "core.v1.PodDNSConfigOption": "1 name string;2 value *string",
    "core.v1.PodIP": "1 ip *string",
    "core.v1.PodOS": "1 name *string",
    "core.v1.PodReadinessGate": "1 conditionType *string",
    "core.v1.PodResourceClaim": "1 name *string;3 resourceClaimName *string;4 resourceClaimTemplateName *string",
    "core.v1.PodResourceClaimStatus": "1 name *string;2 resourceClaimName *string",
    "core.v1.PodSchedulingGate": "1 name *string",
    "core.v1.PodSecurityContext": (
        "1 seLinuxOptions core.v1.SELinuxOptions;2 runAsUser *int64;3 runAsNonRoot *bool;"
        "4 supplementalGroups []int64;5 fsGroup *int64;6 runAsGroup *int64;7 sysctls []core.v1.Sysctl;"
        "8 windowsOptions core.v1.WindowsSecurityContextOptions;9 fsGroupChangePolicy *string;"
        "10 seccompProfile core.v1.SeccompProfile;11 appArmorProfile core.v1.AppArmorProfile;"
        "12 supplementalGroupsPolicy *string;13 seLinuxChangePolicy *string"
    ),
    "core.v1.PodSpec": (
        "1 volumes []core.v1.Volume;2 containers []core.v1.Container;3 restartPolicy string;"
        "4 terminationGracePeriodSeconds *int64;5 activeDeadlineSeconds *int64;6 dnsPolicy string;"
        "7 nodeSelector map:string;8 serviceAccountName string;9 serviceAccount string;10 nodeName string;"
        "11 hostNetwork bool;12 hostPID bool;13 hostIPC bool;14 securityContext core.v1.PodSecurityContext;"
        "15 imagePullSecrets []core.v1.LocalObjectReference;16 hostname string;17 subdomain string;"
        "18 affinity core.v1.Affinity;19 schedulerName string;20 initContainers []core.v1.Container;"
        "21 automountServiceAccountToken *bool;22 tolerations []core.v1.Toleration;"
        "23 hostAliases []core.v1.HostAlias;24 priorityClassName string;25 priority *int32;"
        "26 dnsConfig core.v1.PodDNSConfig;27 shareProcessNamespace *bool;"
        "28 readinessGates []core.v1.PodReadinessGate;29 runtimeClassName *string;"
        "30 enableServiceLinks *bool;31 preemptionPolicy *string;32 overhead map:api.resource.Quantity;"
        "33 topologySpreadConstraints []core.v1.TopologySpreadConstraint;"
        "34 ephemeralContainers []core.v1.EphemeralContainer;35 setHostnameAsFQDN *bool;36 os core.v1.PodOS;"
        "37 hostUsers *bool;38 schedulingGates []core.v1.PodSchedulingGate;"
        "39 resourceClaims []core.v1.PodResourceClaim;40 resources core.v1.ResourceRequirements"
    ),
    "core.v1.PodStatus": (
        "1 phase string;2 conditions []core.v1.PodCondition;3 message string;4 reason string;5 hostIP string;"
        "6 podIP string;7 startTime apis.meta.v1.Time;8 containerStatuses []core.v1.ContainerStatus;"
        "9 qosClass string;10 initContainerStatuses []core.v1.ContainerStatus;11 nominatedNodeName string;"
        "12 podIPs []core.v1.PodIP;13 ephemeralContainerStatuses []core.v1.ContainerStatus;14 resize string;"
        "15 resourceClaimStatuses []core.v1.PodResourceClaimStatus;16 hostIPs []core.v1.HostIP"
    ),
    "core.v1.PodTemplate": "1 metadata apis.meta.v1.ObjectMeta;2 template core.v1.PodTemplateSpec",
    "core.v1.PodTemplateSpec": "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.PodSpec",
    "core.v1.PortStatus": "1 port *int32;2 protocol *string;3 error *string",
    "core.v1.PortworxVolumeSource": "1 volumeID *string;2 fsType string;3 readOnly bool",
    "core.v1.PreferredSchedulingTerm": "1 weight *int32;2 preference core.v1.NodeSelectorTerm",
    "core.v1.Probe": (
        "1  core.v1.ProbeHandler;2 initialDelaySeconds int32;3 timeoutSeconds int32;4 periodSeconds int32;"
        "5 successThreshold int32;6 failureThreshold int32;7 terminationGracePeriodSeconds *int64"
    ),
    "core.v1.ProbeHandler": (
        "1 exec core.v1.ExecAction;2 httpGet core.v1.HTTPGetAction;3 tcpSocket core.v1.TCPSocketAction;"
        "4 grpc core.v1.GRPCAction"
    ),
    "core.v1.ProjectedVolumeSource": "1 sources []core.v1.VolumeProjection;2 defaultMode *int32",
    "core.v1.QuobyteVolumeSource": (
        "1 registry *string;2 volume *string;3 readOnly bool;4 user string;5 group string;6 tenant string"
    ),
    "core.v1.RBDPersistentVolumeSource": (
        "1 monitors []string;2 image *string;3 fsType string;4 pool string;5 user string;6 keyring string;"
        "7 secretRef core.v1.SecretReference;8 readOnly bool"
    ),
    "core.v1.RBDVolumeSource": (
        "1 monitors []string;2 image *string;3 fsType string;4 pool string;5 user string;6 keyring string;"
        "7 secretRef core.v1.LocalObjectReference;8 readOnly bool"
    ),
    "core.v1.ReplicationController": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.ReplicationControllerSpec;"
        "3 status core.v1.ReplicationControllerStatus"
    ),
    "core.v1.ReplicationControllerCondition": (
        "1 type *string;2 status *string;3 lastTransitionTime apis.meta.v1.Time;4 reason string;"
        "5 message string"
    ),
    "core.v1.ReplicationControllerSpec": (
        "1 replicas *int32;2 selector map:string;3 template core.v1.PodTemplateSpec;4 minReadySeconds int32"
    ),
    "core.v1.ReplicationControllerStatus": (
        "1 replicas *int32;2 fullyLabeledReplicas int32;3 observedGeneration int64;4 readyReplicas int32;"
        "5 availableReplicas int32;6 conditions []core.v1.ReplicationControllerCondition"
    ),
    "core.v1.ResourceClaim": "1 name *string;2 request string",
    "core.v1.ResourceFieldSelector": "1 containerName string;2 resource *string;3 divisor api.resource.Quantity",
    "core.v1.ResourceHealth": "1 resourceID *string;2 health string",
    "core.v1.ResourceQuota": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.ResourceQuotaSpec;"
        "3 status core.v1.ResourceQuotaStatus"
    ),
    "core.v1.ResourceQuotaSpec": (
        "1 hard map:api.resource.Quantity;2 scopes []string;3 scopeSelector core.v1.ScopeSelector"
    ),
    "core.v1.ResourceQuotaStatus": "1 hard map:api.resource.Quantity;2 used map:api.resource.Quantity",
    "core.v1.ResourceRequirements": (
        "1 limits map:api.resource.Quantity;2 requests map:api.resource.Quantity;"
        "3 claims []core.v1.ResourceClaim"
    ),
    "core.v1.ResourceStatus": "1 name *string;2 resources []core.v1.ResourceHealth",
    "core.v1.SELinuxOptions": "1 user string;2 role string;3 type string;4 level string",
    "core.v1.ScaleIOPersistentVolumeSource": (
        "1 gateway *string;2 system *string;3 secretRef core.v1.SecretReference;4 sslEnabled bool;"
        "5 protectionDomain string;6 storagePool string;7 storageMode string;8 volumeName string;"
        "9 fsType string;10 readOnly bool"
    ),
    "core.v1.ScaleIOVolumeSource": (
        "1 gateway *string;2 system *string;3 secretRef core.v1.LocalObjectReference;4 sslEnabled bool;"
        "5 protectionDomain string;6 storagePool string;7 storageMode string;8 volumeName string;"
        "9 fsType string;10 readOnly bool"
    ),
    "core.v1.ScopeSelector": "1 matchExpressions []core.v1.ScopedResourceSelectorRequirement",
    "core.v1.ScopedResourceSelectorRequirement": "1 scopeName *string;2 operator *string;3 values []string",
    "core.v1.SeccompProfile": "1 type *string;2 localhostProfile *string",
    "core.v1.Secret": (
        "1 metadata apis.meta.v1.ObjectMeta;2 data map:bytes;3 type string;4 stringData map:string;"
        "5 immutable *bool"
    ),
    "core.v1.SecretEnvSource": "1  core.v1.LocalObjectReference;2 optional *bool",
    "core.v1.SecretKeySelector": "1  core.v1.LocalObjectReference;2 key *string;3 optional *bool",
    "core.v1.SecretProjection": "1  core.v1.LocalObjectReference;2 items []core.v1.KeyToPath;4 optional *bool",
    "core.v1.SecretReference": "1 name string;2 namespace string",
    "core.v1.SecretVolumeSource": (
        "1 secretName string;2 items []core.v1.KeyToPath;3 defaultMode *int32;4 optional *bool"
    ),
    "core.v1.SecurityContext": (
        "1 capabilities core.v1.Capabilities;2 privileged *bool;3 seLinuxOptions core.v1.SELinuxOptions;"
        "4 runAsUser *int64;5 runAsNonRoot *bool;6 readOnlyRootFilesystem *bool;"
        "7 allowPrivilegeEscalation *bool;8 runAsGroup *int64;9 procMount *string;"
        "10 windowsOptions core.v1.WindowsSecurityContextOptions;11 seccompProfile core.v1.SeccompProfile;"
        "12 appArmorProfile core.v1.AppArmorProfile"
    ),
    "core.v1.Service": "1 metadata apis.meta.v1.ObjectMeta;2 spec core.v1.ServiceSpec;3 status core.v1.ServiceStatus",
    "core.v1.ServiceAccount": (
        "1 metadata apis.meta.v1.ObjectMeta;2 secrets []core.v1.ObjectReference;"
        "3 imagePullSecrets []core.v1.LocalObjectReference;4 automountServiceAccountToken *bool"
    ),
    "core.v1.ServiceAccountTokenProjection": "1 audience string;2 expirationSeconds *int64;3 path *string",
    "core.v1.ServicePort": (
        "1 name string;2 protocol string;3 port *int32;4 targetPort util.intstr.IntOrString;5 nodePort int32;"
        "6 appProtocol *string"
    ),
    "core.v1.ServiceSpec": (
        "1 ports []core.v1.ServicePort;2 selector map:string;3 clusterIP string;4 type string;"
        "5 externalIPs []string;7 sessionAffinity string;8 loadBalancerIP string;"
        "9 loadBalancerSourceRanges []string;10 externalName string;11 externalTrafficPolicy string;"
        "12 healthCheckNodePort int32;13 publishNotReadyAddresses bool;"
        "14 sessionAffinityConfig core.v1.SessionAffinityConfig;17 ipFamilyPolicy *string;"
        "18 clusterIPs []string;19 ipFamilies []string;20 allocateLoadBalancerNodePorts *bool;"
        "21 loadBalancerClass *string;22 internalTrafficPolicy *string;23 trafficDistribution *string"
    ),
    "core.v1.ServiceStatus": "1 loadBalancer core.v1.LoadBalancerStatus;2 conditions []apis.meta.v1.Condition",
    "core.v1.SessionAffinityConfig": "1 clientIP core.v1.ClientIPConfig",
    "core.v1.SleepAction": "1 seconds *int64",
    "core.v1.StorageOSPersistentVolumeSource": (
        "1 volumeName string;2 volumeNamespace string;3 fsType string;4 readOnly bool;"
        "5 secretRef core.v1.ObjectReference"
    ),
    "core.v1.StorageOSVolumeSource": (
        "1 volumeName string;2 volumeNamespace string;3 fsType string;4 readOnly bool;"
        "5 secretRef core.v1.LocalObjectReference"
    ),
    "core.v1.Sysctl": "1 name *string;2 value *string",
    "core.v1.TCPSocketAction": "1 port util.intstr.IntOrString;2 host string",
    "core.v1.Taint": "1 key *string;2 value string;3 effect *string;4 timeAdded apis.meta.v1.Time",
    "core.v1.Toleration": "1 key string;2 operator string;3 value string;4 effect string;5 tolerationSeconds *int64",
    "core.v1.TopologySelectorLabelRequirement": "1 key *string;2 values []string",
    "core.v1.TopologySelectorTerm": "1 matchLabelExpressions []core.v1.TopologySelectorLabelRequirement",
    "core.v1.TopologySpreadConstraint": (
        "1 maxSkew *int32;2 topologyKey *string;3 whenUnsatisfiable *string;"
        "4 labelSelector apis.meta.v1.LabelSelector;5 minDomains *int32;6 nodeAffinityPolicy *string;"
        "7 nodeTaintsPolicy *string;8 matchLabelKeys []string"
    ),
    "core.v1.TypedLocalObjectReference": "1 apiGroup *string;2 kind *string;3 name *string",
    "core.v1.TypedObjectReference": "1 apiGroup *string;2 kind *string;3 name *string;4 namespace *string",
    "core.v1.Volume": "1 name *string;2  core.v1.VolumeSource",
    "core.v1.VolumeDevice": "1 name *string;2 devicePath *string",
    "core.v1.VolumeMount": (
        "1 name *string;2 readOnly bool;3 mountPath *string;4 subPath string;5 mountPropagation *string;"
        "6 subPathExpr string;7 recursiveReadOnly *string"
    ),
    "core.v1.VolumeMountStatus": "1 name *string;2 mountPath *string;3 readOnly bool;4 recursiveReadOnly *string",
    "core.v1.VolumeNodeAffinity": "1 required core.v1.NodeSelector",
    "core.v1.VolumeProjection": (
        "1 secret core.v1.SecretProjection;2 downwardAPI core.v1.DownwardAPIProjection;"
        "3 configMap core.v1.ConfigMapProjection;4 serviceAccountToken core.v1.ServiceAccountTokenProjection;"
        "5 clusterTrustBundle core.v1.ClusterTrustBundleProjection"
    ),
    "core.v1.VolumeResourceRequirements": "1 limits map:api.resource.Quantity;2 requests map:api.resource.Quantity",
    "core.v1.VolumeSource": (
        "1 hostPath core.v1.HostPathVolumeSource;2 emptyDir core.v1.EmptyDirVolumeSource;"
        "3 gcePersistentDisk core.v1.GCEPersistentDiskVolumeSource;"
        "4 awsElasticBlockStore core.v1.AWSElasticBlockStoreVolumeSource;"
        "5 gitRepo core.v1.GitRepoVolumeSource;6 secret core.v1.SecretVolumeSource;"
        "7 nfs core.v1.NFSVolumeSource;8 iscsi core.v1.ISCSIVolumeSource;"
        "9 glusterfs core.v1.GlusterfsVolumeSource;"
        "10 persistentVolumeClaim core.v1.PersistentVolumeClaimVolumeSource;11 rbd core.v1.RBDVolumeSource;"
        "12 flexVolume core.v1.FlexVolumeSource;13 cinder core.v1.CinderVolumeSource;"
        "14 cephfs core.v1.CephFSVolumeSource;15 flocker core.v1.FlockerVolumeSource;"
        "16 downwardAPI core.v1.DownwardAPIVolumeSource;17 fc core.v1.FCVolumeSource;"
        "18 azureFile core.v1.AzureFileVolumeSource;19 configMap core.v1.ConfigMapVolumeSource;"
        "20 vsphereVolume core.v1.VsphereVirtualDiskVolumeSource;21 quobyte core.v1.QuobyteVolumeSource;"
        "22 azureDisk core.v1.AzureDiskVolumeSource;"
        "23 photonPersistentDisk core.v1.PhotonPersistentDiskVolumeSource;"
        "24 portworxVolume core.v1.PortworxVolumeSource;25 scaleIO core.v1.ScaleIOVolumeSource;"
        "26 projected core.v1.ProjectedVolumeSource;27 storageos core.v1.StorageOSVolumeSource;"
        "28 csi core.v1.CSIVolumeSource;29 ephemeral core.v1.EphemeralVolumeSource;"
        "30 image core.v1.ImageVolumeSource"
    ),
    "core.v1.VsphereVirtualDiskVolumeSource": (
        "1 volumePath *string;2 fsType string;3 storagePolicyName string;4 storagePolicyID string"
    ),
    "core.v1.WeightedPodAffinityTerm": "1 weight *int32;2 podAffinityTerm core.v1.PodAffinityTerm",
    "core.v1.WindowsSecurityContextOptions": (
        "1 gmsaCredentialSpecName *string;2 gmsaCredentialSpec *string;3 runAsUserName *string;"
        "4 hostProcess *bool"
    ),
    "discovery.v1.Endpoint": (
        "1 addresses []string;2 conditions discovery.v1.EndpointConditions;3 hostname *string;"
        "4 targetRef core.v1.ObjectReference;5 deprecatedTopology map:string;6 nodeName *string;"
        "7 zone *string;8 hints discovery.v1.EndpointHints"
    ),
    "discovery.v1.EndpointConditions": "1 ready *bool;2 serving *bool;3 terminating *bool",
    "discovery.v1.EndpointHints": "1 forZones []discovery.v1.ForZone",
    "discovery.v1.EndpointPort": "1 name *string;2 protocol *string;3 port *int32;4 appProtocol *string",
    "discovery.v1.EndpointSlice": (
        "1 metadata apis.meta.v1.ObjectMeta;2 endpoints []discovery.v1.Endpoint;"
        "3 ports []discovery.v1.EndpointPort;4 addressType *string"
    ),
    "discovery.v1.ForZone": "1 name *string",
    "events.v1.Event": (
        "1 metadata apis.meta.v1.ObjectMeta;2 eventTime apis.meta.v1.MicroTime;"
        "3 series events.v1.EventSeries;4 reportingController string;5 reportingInstance string;"
        "6 action string;7 reason string;8 regarding core.v1.ObjectReference;"
        "9 related core.v1.ObjectReference;10 note string;11 type string;"
        "12 deprecatedSource core.v1.EventSource;13 deprecatedFirstTimestamp apis.meta.v1.Time;"
        "14 deprecatedLastTimestamp apis.meta.v1.Time;15 deprecatedCount int32"
    ),
    "events.v1.EventSeries": "1 count *int32;2 lastObservedTime apis.meta.v1.MicroTime",
    "networking.v1.HTTPIngressPath": "1 path string;2 backend networking.v1.IngressBackend;3 pathType *string",
    "networking.v1.HTTPIngressRuleValue": "1 paths []networking.v1.HTTPIngressPath",
    "networking.v1.IPBlock": "1 cidr *string;2 except []string",
    "networking.v1.Ingress": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec networking.v1.IngressSpec;"
        "3 status networking.v1.IngressStatus"
    ),
    "networking.v1.IngressBackend": (
        "3 resource core.v1.TypedLocalObjectReference;4 service networking.v1.IngressServiceBackend"
    ),
    "networking.v1.IngressClass": "1 metadata apis.meta.v1.ObjectMeta;2 spec networking.v1.IngressClassSpec",
    "networking.v1.IngressClassParametersReference": (
        "1 apiGroup *string;2 kind *string;3 name *string;4 scope *string;5 namespace *string"
    ),
    "networking.v1.IngressClassSpec": "1 controller string;2 parameters networking.v1.IngressClassParametersReference",
    "networking.v1.IngressLoadBalancerIngress": (
        "1 ip string;2 hostname string;4 ports []networking.v1.IngressPortStatus"
    ),
    "networking.v1.IngressLoadBalancerStatus": "1 ingress []networking.v1.IngressLoadBalancerIngress",
    "networking.v1.IngressPortStatus": "1 port *int32;2 protocol *string;3 error *string",
    "networking.v1.IngressRule": "1 host string;2  networking.v1.IngressRuleValue",
    "networking.v1.IngressRuleValue": "1 http networking.v1.HTTPIngressRuleValue",
    "networking.v1.IngressServiceBackend": "1 name *string;2 port networking.v1.ServiceBackendPort",
    "networking.v1.IngressSpec": (
        "1 defaultBackend networking.v1.IngressBackend;2 tls []networking.v1.IngressTLS;"
        "3 rules []networking.v1.IngressRule;4 ingressClassName *string"
    ),
    "networking.v1.IngressStatus": "1 loadBalancer networking.v1.IngressLoadBalancerStatus",
    "networking.v1.IngressTLS": "1 hosts []string;2 secretName string",
    "networking.v1.NetworkPolicy": "1 metadata apis.meta.v1.ObjectMeta;2 spec networking.v1.NetworkPolicySpec",
    "networking.v1.NetworkPolicyEgressRule": (
        "1 ports []networking.v1.NetworkPolicyPort;2 to []networking.v1.NetworkPolicyPeer"
    ),
    "networking.v1.NetworkPolicyIngressRule": (
        "1 ports []networking.v1.NetworkPolicyPort;2 from []networking.v1.NetworkPolicyPeer"
    ),
    "networking.v1.NetworkPolicyPeer": (
        "1 podSelector apis.meta.v1.LabelSelector;2 namespaceSelector apis.meta.v1.LabelSelector;"
        "3 ipBlock networking.v1.IPBlock"
    ),
    "networking.v1.NetworkPolicyPort": "1 protocol *string;2 port util.intstr.IntOrString;3 endPort *int32",
    "networking.v1.NetworkPolicySpec": (
        "1 podSelector apis.meta.v1.LabelSelector;2 ingress []networking.v1.NetworkPolicyIngressRule;"
        "3 egress []networking.v1.NetworkPolicyEgressRule;4 policyTypes []string"
    ),
    "networking.v1.ServiceBackendPort": "1 name string;2 number int32",
    "node.v1.Overhead": "1 podFixed map:api.resource.Quantity",
    "node.v1.RuntimeClass": (
        "1 metadata apis.meta.v1.ObjectMeta;2 handler *string;3 overhead node.v1.Overhead;"
        "4 scheduling node.v1.Scheduling"
    ),
    "node.v1.Scheduling": "1 nodeSelector map:string;2 tolerations []core.v1.Toleration",
    "policy.v1.Eviction": "1 metadata apis.meta.v1.ObjectMeta;2 deleteOptions apis.meta.v1.DeleteOptions",
    "policy.v1.PodDisruptionBudget": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec policy.v1.PodDisruptionBudgetSpec;"
        "3 status policy.v1.PodDisruptionBudgetStatus"
    ),
    "policy.v1.PodDisruptionBudgetSpec": (
        "1 minAvailable util.intstr.IntOrString;2 selector apis.meta.v1.LabelSelector;"
        "3 maxUnavailable util.intstr.IntOrString;4 unhealthyPodEvictionPolicy *string"
    ),
    "policy.v1.PodDisruptionBudgetStatus": (
        "1 observedGeneration int64;2 disruptedPods map:apis.meta.v1.Time;3 disruptionsAllowed *int32;"
        "4 currentHealthy *int32;5 desiredHealthy *int32;6 expectedPods *int32;"
        "7 conditions []apis.meta.v1.Condition"
    ),
    "rbac.v1.AggregationRule": "1 clusterRoleSelectors []apis.meta.v1.LabelSelector",
    "rbac.v1.ClusterRole": (
        "1 metadata apis.meta.v1.ObjectMeta;2 rules []rbac.v1.PolicyRule;"
        "3 aggregationRule rbac.v1.AggregationRule"
    ),
    "rbac.v1.ClusterRoleBinding": (
        "1 metadata apis.meta.v1.ObjectMeta;2 subjects []rbac.v1.Subject;3 roleRef rbac.v1.RoleRef"
    ),
    "rbac.v1.PolicyRule": (
        "1 verbs []string;2 apiGroups []string;3 resources []string;4 resourceNames []string;"
        "5 nonResourceURLs []string"
    ),
    "rbac.v1.Role": "1 metadata apis.meta.v1.ObjectMeta;2 rules []rbac.v1.PolicyRule",
    "rbac.v1.RoleBinding": "1 metadata apis.meta.v1.ObjectMeta;2 subjects []rbac.v1.Subject;3 roleRef rbac.v1.RoleRef",
    "rbac.v1.RoleRef": "1 apiGroup *string;2 kind *string;3 name *string",
    "rbac.v1.Subject": "1 kind *string;2 apiGroup string;3 name *string;4 namespace string",
    "runtime.RawExtension": "1 raw *bytes",
    "scheduling.v1.PriorityClass": (
        "1 metadata apis.meta.v1.ObjectMeta;2 value *int32;3 globalDefault bool;4 description string;"
        "5 preemptionPolicy *string"
    ),
    "storage.v1.CSIDriver": "1 metadata apis.meta.v1.ObjectMeta;2 spec storage.v1.CSIDriverSpec",
    "storage.v1.CSIDriverSpec": (
        "1 attachRequired *bool;2 podInfoOnMount *bool;3 volumeLifecycleModes []string;"
        "4 storageCapacity *bool;5 fsGroupPolicy *string;6 tokenRequests []storage.v1.TokenRequest;"
        "7 requiresRepublish *bool;8 seLinuxMount *bool"
    ),
    "storage.v1.CSINode": "1 metadata apis.meta.v1.ObjectMeta;2 spec storage.v1.CSINodeSpec",
    "storage.v1.CSINodeDriver": (
        "1 name *string;2 nodeID *string;3 topologyKeys []string;4 allocatable storage.v1.VolumeNodeResources"
    ),
    "storage.v1.CSINodeSpec": "1 drivers []storage.v1.CSINodeDriver",
    "storage.v1.CSIStorageCapacity": (
        "1 metadata apis.meta.v1.ObjectMeta;2 nodeTopology apis.meta.v1.LabelSelector;"
        "3 storageClassName *string;4 capacity api.resource.Quantity;"
        "5 maximumVolumeSize api.resource.Quantity"
    ),
    "storage.v1.StorageClass": (
        "1 metadata apis.meta.v1.ObjectMeta;2 provisioner *string;3 parameters map:string;"
        "4 reclaimPolicy *string;5 mountOptions []string;6 allowVolumeExpansion *bool;"
        "7 volumeBindingMode *string;8 allowedTopologies []core.v1.TopologySelectorTerm"
    ),
    "storage.v1.TokenRequest": "1 audience *string;2 expirationSeconds *int64",
    "storage.v1.VolumeAttachment": (
        "1 metadata apis.meta.v1.ObjectMeta;2 spec storage.v1.VolumeAttachmentSpec;"
        "3 status storage.v1.VolumeAttachmentStatus"
    ),
    "storage.v1.VolumeAttachmentSource": (
        "1 persistentVolumeName *string;2 inlineVolumeSpec core.v1.PersistentVolumeSpec"
    ),
    "storage.v1.VolumeAttachmentSpec": (
        "1 attacher *string;2 source storage.v1.VolumeAttachmentSource;3 nodeName *string"
    ),
    "storage.v1.VolumeAttachmentStatus": (
        "1 attached *bool;2 attachmentMetadata map:string;3 attachError storage.v1.VolumeError;"
        "4 detachError storage.v1.VolumeError"
    ),
    "storage.v1.VolumeError": "1 time apis.meta.v1.Time;2 message string",
    "storage.v1.VolumeNodeResources": "1 count *int32",
    "util.intstr.IntOrString": "1 type int64;2 intVal int32;3 strVal string",
}
