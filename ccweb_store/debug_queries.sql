-- Ready-to-paste queries for debugging pending replies (docs/operator.md).
-- Each runs unchanged on SQLite and PostgreSQL; tests/test_views.py runs every one of them.
-- A query starts at its "-- name:" line and ends at the next one.

-- name: stuck-waiting
-- Requests still waiting for their target after an hour, oldest first.
SELECT request_id, source_title, target_conversation_id, target_title, age_seconds,
       target_run_id, target_run_status, target_run_worker_id, target_run_attempts
FROM pending_replies
WHERE status = 'waiting' AND age_seconds > 3600
ORDER BY age_seconds DESC;

-- name: ready-blocked
-- Replies that are ready but held back because their source is running right now.
SELECT p.request_id, p.source_conversation_id, p.source_title, p.age_seconds,
       r.id AS source_run_id, r.kind AS source_run_kind, r.worker_id, r.started_at,
       r.lease_expires_at
FROM pending_replies p
JOIN runs r ON r.session_id = p.source_conversation_id AND r.status = 'running'
WHERE p.status = 'ready'
ORDER BY p.age_seconds DESC;

-- name: failures-by-error
-- Failed requests grouped by their error, most frequent first.
SELECT COALESCE(last_error, '(no error recorded)') AS error, COUNT(*) AS requests,
       MIN(created_at) AS first_failed_request, MAX(created_at) AS last_failed_request
FROM pending_replies
WHERE status = 'failed'
GROUP BY COALESCE(last_error, '(no error recorded)')
ORDER BY requests DESC, error;

-- name: hop-limit-chains
-- Requests at or one below the hop limit (CCWEB_MAX_HOPS, default 4: change the 3 to yours
-- minus one), with who asked whom.
SELECT request_id, status, hop_count,
       COALESCE(source_title, '?') || ' (' || source_conversation_id || ') -> '
           || COALESCE(target_title, '?') || ' (' || target_conversation_id || ')' AS chain,
       created_at
FROM reply_requests
WHERE hop_count >= 3
ORDER BY hop_count DESC, created_at DESC;

-- name: request-story
-- Everything about one request, in order: replace PASTE_REQUEST_ID with its id.
WITH story AS (SELECT * FROM reply_requests WHERE request_id = 'PASTE_REQUEST_ID')
SELECT 1 AS step, 'request' AS part, created_at AS happened_at,
       source_conversation_id AS conversation_id, status, original_request AS detail
FROM story
UNION ALL
SELECT 2, 'request message (target)', m.created_at, m.session_id, m.role, m.content
FROM story JOIN messages m ON m.id = story.message_id
UNION ALL
SELECT 3, 'run ' || r.kind, r.created_at, r.session_id, r.status,
       COALESCE(r.error, r.output, r.worker_id)
FROM story JOIN runs r ON r.reply_request_id = story.request_id
UNION ALL
SELECT 4, 'reply message (source)', m.created_at, m.session_id, m.role, m.content
FROM story JOIN messages m ON m.id = story.reply_message_id
ORDER BY happened_at, step;
