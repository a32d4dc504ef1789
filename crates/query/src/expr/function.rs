//! `$function`: a JavaScript function called with evaluated arguments (mongod's
//! `ExpressionFunction`), parsed with mongod's checks (31260–31263, 31418, 31419, 31432) and run
//! through `crate::js` under the command's budgets.

use bson::Bson;

use super::{evaluate, fail, parse, Expr, Scope, Value, Vars};
use crate::js::JsProgram;
use tideway_base::error::{CommandResult, ErrorCode};

pub(super) fn parse_function(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let Bson::Document(spec) = operand else {
        return Err(fail(
            ErrorCode::Location31260,
            format!(
                "$function requires an object as an argument, found: {}",
                tideway_base::display::type_name(operand)
            ),
        ));
    };
    let body = spec.get("body").ok_or_else(|| {
        fail(
            ErrorCode::Location31261,
            "The body function must be specified.",
        )
    })?;
    let source = match parse(body, scope)? {
        Expr::Literal(Bson::String(source) | Bson::JavaScriptCode(source)) => source,
        Expr::Literal(_) => {
            return Err(fail(
                ErrorCode::Location31262,
                "The body function must evaluate to type string or code",
            ))
        }
        _ => {
            return Err(fail(
                ErrorCode::Location31432,
                "The body function must be a constant expression",
            ))
        }
    };
    let args = spec.get("args").ok_or_else(|| {
        fail(
            ErrorCode::Location31263,
            "The args field must be specified.",
        )
    })?;
    let args = parse(args, scope)?;
    let lang = spec.get("lang").ok_or_else(|| {
        fail(
            ErrorCode::Location31418,
            "The lang field must be specified.",
        )
    })?;
    if lang.as_str() != Some("js") {
        return Err(fail(
            ErrorCode::Location31419,
            "Currently the only supported language specifier is 'js'.",
        ));
    }
    Ok(Expr::Function {
        program: JsProgram::new(vec![source], None),
        args: Box::new(args),
    })
}

pub(super) fn evaluate_function(
    program: &JsProgram,
    args: &Expr,
    vars: &mut Vars,
) -> CommandResult<Value> {
    crate::js::check_enabled(ErrorCode::Location31264, crate::js::DISABLED_MESSAGE)?;
    let Some(Bson::Array(arguments)) = evaluate(args, vars)? else {
        return Err(fail(
            ErrorCode::Location31266,
            "The args field must be of type array",
        ));
    };
    program.call(0, None, &arguments).map(Some)
}
