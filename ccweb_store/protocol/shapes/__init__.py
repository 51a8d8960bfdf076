"""The wire's camelCase JSON, shaped from what the services return: the objects of SPEC §3
(Session, Message, Reply, Run), credentials, and the answers of the tools and host methods.

Services speak Python (rows and small dataclasses); the edges (``http/rpc.py``'s table, the
tool registry, the console, the CLI's ``--json``) shape their results here, so nothing else
decides how an answer looks on the wire.

One module per area: ``objects`` (the objects of SPEC §3, credentials, runs), ``conversations``,
``replies`` (sends and the reply lifecycle), ``prompt_forms``, ``operator`` (the operator's views,
``doctor``, ``repair-json``) and ``events``. This package re-exports every shaping function, so
callers import from ``ccweb_store.protocol.shapes`` whichever area an answer belongs to.
"""

from ccweb_store.protocol.shapes.conversations import (
    conversation_listing_out,
    messages_after_out,
    messages_before_out,
    session_page_out,
    session_view_out,
    user_inputs_out,
)
from ccweb_store.protocol.shapes.events import (
    event_out,
    event_page_out,
)
from ccweb_store.protocol.shapes.objects import (
    claim_out,
    completion_out,
    credential_out,
    credentials_out,
    message_out,
    minted_out,
    reply_out,
    run_out,
    runs_out,
    session_fields,
    session_out,
)
from ccweb_store.protocol.shapes.operator import (
    activity_out,
    check_out,
    column_counts_out,
    conversation_detail_out,
    conversation_state_out,
    conversations_page_out,
    doctor_report_out,
    pending_replies_out,
    pending_reply_out,
    repair_summary_out,
    repaired_row_out,
    reply_story_out,
)
from ccweb_store.protocol.shapes.prompt_forms import (
    prompt_answer_out,
    prompt_card_out,
)
from ccweb_store.protocol.shapes.replies import (
    created_conversation_out,
    expired_out,
    pending_reply_answer_out,
    reply_page_out,
    send_out,
)

__all__ = [
    "activity_out",
    "check_out",
    "claim_out",
    "column_counts_out",
    "completion_out",
    "conversation_detail_out",
    "conversation_listing_out",
    "conversation_state_out",
    "conversations_page_out",
    "created_conversation_out",
    "credential_out",
    "credentials_out",
    "doctor_report_out",
    "event_out",
    "event_page_out",
    "expired_out",
    "message_out",
    "messages_after_out",
    "messages_before_out",
    "minted_out",
    "pending_replies_out",
    "pending_reply_answer_out",
    "pending_reply_out",
    "prompt_answer_out",
    "prompt_card_out",
    "repair_summary_out",
    "repaired_row_out",
    "reply_out",
    "reply_page_out",
    "reply_story_out",
    "run_out",
    "runs_out",
    "send_out",
    "session_fields",
    "session_out",
    "session_page_out",
    "session_view_out",
    "user_inputs_out",
]
