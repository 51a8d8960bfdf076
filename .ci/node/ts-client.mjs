// The official TypeScript SDK client against a running ccweb-store, over Streamable HTTP with
// a bearer token: node ts-client.mjs http://127.0.0.1:PORT (the token comes from CCWEB_TOKEN).
// Prints every check and "typescript: N passed, N failed"; exits 1 when one fails.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const PUBLIC_TOOLS = [
  'ccweb_create_conversation',
  'ccweb_get_pending_reply',
  'ccweb_list_conversations',
  'ccweb_list_user_inputs',
  'ccweb_prompt_user',
  'ccweb_send_message',
];
const ALIAS = 'ccweb_request_reply';

const base = (process.argv[2] ?? '').replace(/\/+$/, '');
const token = process.env.CCWEB_TOKEN;
if (!base || !token) {
  console.error('usage: CCWEB_TOKEN=... node ts-client.mjs http://127.0.0.1:PORT');
  process.exit(2);
}
const auth = { Authorization: `Bearer ${token}` };
let passed = 0;
let failed = 0;

function check(what, ok, detail) {
  console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${what}${ok || detail === undefined ? '' : `: ${detail}`}`);
  if (ok) passed += 1;
  else failed += 1;
}

async function rpc(method, params) {
  const response = await fetch(`${base}/rpc`, {
    method: 'POST',
    headers: { ...auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = await response.json();
  if (body.error) throw new Error(`${method}: ${JSON.stringify(body.error)}`);
  return body.result;
}

function payloadOf(result) {
  return result.structuredContent ?? JSON.parse(result.content[0].text);
}

const run = Date.now().toString(36);
const source = `ts-source-${run}`;
const target = `ts-target-${run}`;
const aliasTarget = `ts-alias-${run}`;
for (const [id, title] of [[source, 'TS source'], [target, 'TS target'], [aliasTarget, 'TS alias target']]) {
  await rpc('session.create', { id, title });
}

const client = new Client({ name: 'ccweb-store-ci-ts-client', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp?sourceSessionId=${source}`), {
  requestInit: { headers: auth },
});
try {
  await client.connect(transport);
  const server = client.getServerVersion();
  check('connects with the bearer token and initializes', server?.name === 'ccweb-store', JSON.stringify(server));
  check('the transport holds no session id (stateless server)', transport.sessionId === undefined, transport.sessionId);

  const { tools } = await client.listTools();
  const names = tools.map((tool) => tool.name).sort();
  check('tools/list lists the six public tools', JSON.stringify(names) === JSON.stringify(PUBLIC_TOOLS), names.join(', '));
  check(`tools/list does not list the hidden alias ${ALIAS}`, !names.includes(ALIAS));

  const content = `Run the tests and report back (${run}).`;
  const sent = await client.callTool({
    name: 'ccweb_send_message',
    arguments: { targetConversationId: target, content, replyMode: 'return_and_continue' },
  });
  const sentPayload = payloadOf(sent);
  check(
    'ccweb_send_message queues a return_and_continue request',
    sent.isError === false && sentPayload.status === 'waiting' && typeof sentPayload.requestId === 'string',
    JSON.stringify(sentPayload),
  );

  const inputs = payloadOf(
    await client.callTool({ name: 'ccweb_list_user_inputs', arguments: { conversationId: target } }),
  );
  check(
    "ccweb_list_user_inputs reads the target's input back",
    inputs.returned === 1 && inputs.inputs[0].content === content,
    JSON.stringify(inputs),
  );

  const alias = await client.callTool({
    name: ALIAS,
    arguments: { targetConversationId: aliasTarget, content: 'Review this, please.' },
  });
  const aliasPayload = payloadOf(alias);
  check(
    `the hidden alias ${ALIAS} is callable by name`,
    alias.isError === false && aliasPayload.replyMode === 'return_and_continue',
    JSON.stringify(aliasPayload),
  );

  const toSelf = await client.callTool({
    name: 'ccweb_send_message',
    arguments: { targetConversationId: source, content: 'hi', replyMode: 'one_way' },
  });
  check(
    'a domain error is a tool error the model can read',
    toSelf.isError === true && payloadOf(toSelf).error?.code === 'cannot_target_self',
    JSON.stringify(toSelf),
  );

  try {
    await client.callTool({ name: 'ccweb_no_such_tool', arguments: {} });
    check('an unknown tool is a JSON-RPC error', false, 'the call succeeded');
  } catch (error) {
    check(
      'an unknown tool is the JSON-RPC error -32602',
      error instanceof McpError && error.code === -32602,
      String(error),
    );
  }
} catch (error) {
  check('the client session ran to the end', false, error?.stack ?? String(error));
} finally {
  await client.close().catch(() => {});
}

console.log(`typescript: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
