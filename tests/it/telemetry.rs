//! Spans reach real OTLP receivers: a gRPC TraceService built from the official protocol
//! definitions (`opentelemetry-proto`) and an HTTP/protobuf endpoint decoding the same
//! messages, both on 127.0.0.1:0. The tests assert what a collector would see.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use faultline::enrich::MatchEvent;
use faultline::record::Provenance;
use faultline::telemetry::{RawTelemetryConfig, SpanDropCounters, Telemetry, TelemetryConfig};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::support;

pub(crate) type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

/// The events a Kafka-fed faultline would trace: an NCCL timeout and an Xid, from a record.
fn kafka_events() -> Vec<MatchEvent> {
    let engine = support::hyperscan();
    let lines = [
        "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation \
         timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, \
         Timeout(ms)=600000) ran for 600085 milliseconds before timing out.",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    ];
    let mut events = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        for mut e in support::events_of_line(&engine, line) {
            e.job_id = "llm-pretrain-4821".into();
            e.rank = Some(3);
            e.host = Some("gpu-node-17".into());
            e.pod = Some("trainer-3".into());
            e.source = Provenance::Kafka {
                topic: "fleet.logs".into(),
                partition: 2,
                offset: 1_000 + i as i64,
                line: 1,
            };
            events.push(e);
        }
    }
    assert_eq!(events.len(), 2, "both lines match one entry each");
    events
}

pub(crate) fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

pub(crate) fn string(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)? {
        Value::StringValue(s) => Some(s.clone()),
        other => panic!("{key} is not a string: {other:?}"),
    }
}

fn int(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key)? {
        Value::IntValue(i) => Some(*i),
        other => panic!("{key} is not an integer: {other:?}"),
    }
}

/// What a collector received for [`kafka_events`], checked field by field.
fn assert_received(requests: &[ExportTraceServiceRequest], events: &[MatchEvent]) {
    let mut spans = Vec::new();
    for req in requests {
        for rs in &req.resource_spans {
            let resource = rs.resource.as_ref().expect("a resource");
            assert_eq!(
                string(&resource.attributes, "service.name").as_deref(),
                Some("faultline-test")
            );
            assert_eq!(
                string(&resource.attributes, "deployment.environment").as_deref(),
                Some("ci")
            );
            for ss in &rs.scope_spans {
                spans.extend(ss.spans.iter().cloned());
            }
        }
    }
    assert_eq!(spans.len(), events.len(), "one span per match");
    for event in events {
        let span = spans
            .iter()
            .find(|s| s.name == event.error_code)
            .unwrap_or_else(|| panic!("a span named {}", event.error_code));
        let a = &span.attributes;
        assert_eq!(span.kind, SpanKind::Consumer as i32);
        assert_eq!(
            span.status.as_ref().map(|s| s.code),
            Some(StatusCode::Error as i32)
        );
        assert_eq!(string(a, "exception.type"), Some(event.error_code.clone()));
        assert_eq!(string(a, "exception.message"), Some(event.line.clone()));
        assert_eq!(string(a, "faultline.kb_id"), Some(event.kb_id.clone()));
        assert_eq!(
            string(a, "faultline.job_id").as_deref(),
            Some("llm-pretrain-4821")
        );
        assert_eq!(int(a, "faultline.rank"), Some(3));
        assert_eq!(
            string(a, "faultline.root_cause"),
            Some(event.diagnosis.root_cause.clone())
        );
        assert_eq!(
            string(a, "faultline.role").as_deref(),
            Some(event.role.as_str())
        );
        assert_eq!(string(a, "host.name").as_deref(), Some("gpu-node-17"));
        assert_eq!(string(a, "k8s.pod.name").as_deref(), Some("trainer-3"));
        assert_eq!(string(a, "messaging.system").as_deref(), Some("kafka"));
        assert_eq!(
            string(a, "messaging.destination.name").as_deref(),
            Some("fleet.logs")
        );
        assert_eq!(
            string(a, "messaging.destination.partition.id").as_deref(),
            Some("2")
        );
        let Provenance::Kafka { offset, .. } = event.source else {
            unreachable!("kafka events")
        };
        assert_eq!(int(a, "messaging.kafka.offset"), Some(offset));
        assert_eq!(span.events[0].name, "exception");
    }
    let codes: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(codes.contains(&"NCCL_TIMEOUT"), "{codes:?}");
}

fn config(endpoint: String, protocol: &str) -> TelemetryConfig {
    let raw = RawTelemetryConfig {
        endpoint: Some(endpoint),
        protocol: Some(protocol.into()),
        service_name: Some("faultline-test".into()),
        scheduled_delay_ms: Some(100),
        ..Default::default()
    };
    TelemetryConfig::resolve(&raw, |k| {
        (k == "OTEL_RESOURCE_ATTRIBUTES").then(|| "deployment.environment=ci".to_string())
    })
    .expect("valid")
}

/// Polls until `received` holds at least `n` spans, for at most 30 seconds.
/// Every span of the export requests, in order.
pub(crate) fn spans(requests: &[ExportTraceServiceRequest]) -> impl Iterator<Item = &Span> {
    requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
}

pub(crate) fn spans_arrive(received: &Received, n: usize) -> Vec<ExportTraceServiceRequest> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = received.lock().expect("received").clone();
        let count = spans(&got).count();
        if count >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{count} of {n} spans arrived");
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

#[derive(Clone, Default)]
pub(crate) struct GrpcReceiver(pub Received);

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().expect("received").push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A real OTLP gRPC trace receiver on a free local port: its address, what it received, and
/// its server task (abort it when done).
pub(crate) async fn start_grpc_receiver() -> (
    std::net::SocketAddr,
    GrpcReceiver,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("addr");
    let receiver = GrpcReceiver::default();
    let server = tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(
        TraceServiceServer::new(receiver.clone()),
        tonic::transport::server::TcpIncoming::from(listener),
    ));
    (addr, receiver, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_grpc_receiver() {
    let (addr, receiver, server) = start_grpc_receiver().await;
    let drops = SpanDropCounters::detached();
    let telemetry = Telemetry::start(&config(format!("http://{addr}"), "grpc"), drops.clone())
        .expect("starts")
        .expect("enabled");
    let tracer = telemetry.tracer();
    let events = kafka_events();
    for e in &events {
        tracer.record(e);
    }
    // Shutdown flushes the queue; it blocks, so it runs off the async workers.
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .expect("joins")
        .expect("flushes");
    let received = receiver.0.clone();
    let got = tokio::task::spawn_blocking(move || spans_arrive(&received, 2))
        .await
        .expect("joins");
    assert_received(&got, &events);
    assert_eq!(drops.export_failed.get(), 0);
    assert_eq!(drops.queue_full.get(), 0);
    server.abort();
}

#[test]
fn spans_reach_an_otlp_http_protobuf_receiver() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let addr = listener.local_addr().expect("addr");
    let received: Received = Arc::default();
    let requests: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let (got, reqs) = (Arc::clone(&received), Arc::clone(&requests));
    // Serves until the test process ends; each connection carries one request.
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            let header_end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buf[..header_end]).to_lowercase();
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}:")))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            let len: usize = header("content-length").parse().unwrap_or(0);
            while buf.len() < header_end + len {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let path = head.split(' ').nth(1).unwrap_or_default().to_string();
            reqs.lock()
                .expect("requests")
                .push((path, header("content-type")));
            if let Ok(req) = ExportTraceServiceRequest::decode(&buf[header_end..header_end + len]) {
                got.lock().expect("received").push(req);
            }
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let config = config(format!("http://{addr}"), "http/protobuf");
    assert_eq!(config.endpoint, format!("http://{addr}/v1/traces"));
    let drops = SpanDropCounters::detached();
    let telemetry = Telemetry::start(&config, drops.clone())
        .expect("starts")
        .expect("enabled");
    let tracer = telemetry.tracer();
    let events = kafka_events();
    for e in &events {
        tracer.record(e);
    }
    telemetry.shutdown().expect("flushes");
    let got = spans_arrive(&received, 2);
    assert_received(&got, &events);
    let reqs = requests.lock().expect("requests");
    assert!(!reqs.is_empty());
    for (path, content_type) in reqs.iter() {
        assert_eq!(path, "/v1/traces");
        assert_eq!(content_type, "application/x-protobuf");
    }
    assert_eq!(drops.export_failed.get(), 0);
}

#[test]
fn an_unreachable_collector_counts_failed_exports() {
    // A port that was free a moment ago: nothing listens there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("binds")
        .local_addr()
        .expect("addr");
    let mut config = config(format!("http://{addr}"), "http/protobuf");
    config.export_timeout = Duration::from_secs(2);
    let drops = SpanDropCounters::detached();
    let telemetry = Telemetry::start(&config, drops.clone())
        .expect("starts")
        .expect("enabled");
    let tracer = telemetry.tracer();
    for e in &kafka_events() {
        tracer.record(e);
    }
    let _ = telemetry.shutdown();
    assert_eq!(drops.export_failed.get(), 2);
}
